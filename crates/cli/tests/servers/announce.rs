//! Where a `sluice serve --listen ADDR:0` listens, from its own announcement. Shared with
//! the FUSE crate's tests (included there by path).

/// Reads `sluice serve`'s stdout until its "sluice: serving ... on ADDR:PORT" line and returns
/// the port (None if the output ends first); a thread then drains the rest so the server never
/// blocks on a full pipe.
pub fn announced_port(stdout: std::process::ChildStdout) -> Option<u16> {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let Some(rest) = line.trim().strip_prefix("sluice: serving ") else {
            continue;
        };
        let addr = rest.rsplit(" on ").next()?;
        let port = addr.rsplit(':').next()?.parse().ok()?;
        std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
        return Some(port);
    }
}
