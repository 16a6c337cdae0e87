//! Configuration by Kafka's property names (`bootstrap.servers`, `linger.ms`, …), so settings
//! carry over from the Java client and librdkafka. Unknown names and unparsable values are
//! errors at construction, never silently ignored.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::time::Duration;

/// A set of Kafka-style properties.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    props: BTreeMap<String, String>,
}

impl ClientConfig {
    /// An empty configuration.
    pub fn new() -> ClientConfig {
        ClientConfig::default()
    }

    /// Set a property (builder style).
    pub fn set(mut self, key: &str, value: impl ToString) -> ClientConfig {
        self.props.insert(key.to_string(), value.to_string());
        self
    }

    /// Set a property in place.
    pub fn insert(&mut self, key: &str, value: impl ToString) {
        self.props.insert(key.to_string(), value.to_string());
    }

    /// The raw value of a property.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key).map(|s| s.as_str())
    }

    /// Every property name not in `known`.
    pub(crate) fn check_known(&self, known: &[&str]) -> Result<()> {
        for k in self.props.keys() {
            if !known.contains(&k.as_str()) {
                return Err(Error::invalid(format!("unknown configuration property '{k}'")));
            }
        }
        Ok(())
    }

    pub(crate) fn string(&self, key: &str, default: &str) -> String {
        self.get(key).unwrap_or(default).to_string()
    }

    pub(crate) fn parse<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| Error::invalid(format!("configuration property '{key}': cannot parse '{v}'"))),
        }
    }

    pub(crate) fn ms(&self, key: &str, default_ms: u64) -> Result<Duration> {
        self.parse(key, default_ms).map(Duration::from_millis)
    }

    pub(crate) fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" => Ok(false),
            Some(v) => Err(Error::invalid(format!("configuration property '{key}': '{v}' is not true or false"))),
        }
    }

    pub(crate) fn bootstrap(&self) -> Result<String> {
        self.get("bootstrap.servers")
            .map(|s| s.to_string())
            .ok_or_else(|| Error::invalid("bootstrap.servers is required"))
    }
}

/// Properties every client understands.
pub(crate) const COMMON: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "retry.backoff.ms",
    "metadata.max.age.ms",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_access_and_errors() {
        let c = ClientConfig::new().set("linger.ms", 7).set("enable.idempotence", "TRUE").set("acks", "x");
        assert_eq!(c.ms("linger.ms", 5).expect("ms"), Duration::from_millis(7));
        assert!(c.boolean("enable.idempotence", false).expect("bool"));
        assert!(c.parse::<i16>("acks", 1).is_err());
        assert_eq!(c.parse::<usize>("batch.size", 16384).expect("default"), 16384);
        assert!(c.check_known(&["linger.ms", "enable.idempotence"]).is_err());
        assert!(c.bootstrap().is_err());
    }
}
