//! `kafka-mirror-proxy versions`: the audited table of the Kafka API versions the proxy handles
//! (one row per API, with a header), or with `--check-upstream` what a broker announces beyond it.

use std::process::ExitCode;
use std::time::Duration;

use kmp_protocol::client::Connection;
use kmp_protocol::versions;

use super::table::table;

/// Prints the table (exit 0), or what `check_upstream` announces that the table has not audited
/// (exit 1 when anything).
#[allow(clippy::print_stdout, reason = "CLI output")]
pub(crate) async fn run(check_upstream: Option<String>) -> anyhow::Result<ExitCode> {
    let Some(addr) = check_upstream else {
        let rows: Vec<Vec<String>> = versions::TABLE
            .iter()
            .map(|a| {
                vec![
                    (a.key as i16).to_string(),
                    format!("{:?}", a.key),
                    format!("{}..={}", a.min, a.max),
                    format!("{:?}", a.handling),
                ]
            })
            .collect();
        print!("{}", table(&["KEY", "API", "VERSIONS", "HANDLING"], &[0], &rows));
        return Ok(ExitCode::SUCCESS);
    };
    let mut conn = Connection::connect(&addr, Duration::from_secs(10), "kafka-mirror-proxy-versions").await?;
    let announced = conn.api_versions().await?;
    let findings = versions::unaudited(&announced);
    println!("{addr} announces {} APIs", announced.len());
    for f in &findings {
        println!("UNAUDITED {f:?}");
    }
    Ok(if findings.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
