//! `faultproxy --target PORT [--drop-per-mille N] [--seed S] [--stats-file PATH]`: run the fault-injecting proxy
//! (for the Python compatibility suite); prints its listening port on the first line of stdout
//! and runs until killed.

fn arg(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok())
}

fn main() {
    let Some(target) = arg("--target") else {
        eprintln!("usage: faultproxy --target PORT [--drop-per-mille N] [--seed S]");
        std::process::exit(2);
    };
    let proxy = match sluice_tests::proxy::Proxy::start(target as u16, arg("--seed").unwrap_or(1)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("faultproxy: {e}");
            std::process::exit(1);
        }
    };
    proxy
        .faults
        .drop_response_per_mille
        .store(arg("--drop-per-mille").unwrap_or(0) as u32, std::sync::atomic::Ordering::Relaxed);
    println!("{}", proxy.port);
    let stats = std::env::args().skip_while(|a| a != "--stats-file").nth(1);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if let Some(path) = &stats {
            let dropped = proxy.faults.dropped.load(std::sync::atomic::Ordering::Relaxed);
            let _ = std::fs::write(path, dropped.to_string());
        }
    }
}
