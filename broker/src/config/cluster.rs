//! Cluster settings that need parsing beyond a single value.

use std::collections::BTreeMap;

/// `controller.quorum.voters`: `id@host:port,...` (the Raft address of each voter).
pub fn parse_voters(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut out = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item.split_once('@').ok_or_else(|| format!("'{item}' is not id@host:port"))?;
        let id: u64 = id.trim().parse().map_err(|_| format!("'{item}': the id must be a number"))?;
        let addr = addr.trim();
        addr.parse::<std::net::SocketAddr>().map_err(|_| format!("'{item}': {addr} is not an ip:port"))?;
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("voter {id} is named twice"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_parse_and_errors() {
        let v = parse_voters("1@127.0.0.1:9093, 2@127.0.0.1:9094").unwrap();
        assert_eq!(v.len(), 2);
        assert!(parse_voters("1@x:1").is_err());
        assert!(parse_voters("a@127.0.0.1:1").is_err());
        assert!(parse_voters("1@127.0.0.1:1,1@127.0.0.1:2").is_err());
        assert!(parse_voters("127.0.0.1:1").is_err());
    }
}
