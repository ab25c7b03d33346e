//! Text tables of the `mirrors` CLI: columns as wide as their widest cell, chosen columns
//! right-aligned, and the metadata sync table of `--describe`.

use kmp_protocol::mirror_api::DescribedMirror;

/// A text table: columns as wide as their widest cell, `right` (column indexes) right-aligned,
/// two spaces between columns, no trailing blanks.
pub(super) fn table(headers: &[&str], right: &[usize], rows: &[Vec<String>]) -> String {
    let columns = headers.len();
    let cell = |r: &Vec<String>, i: usize| r.get(i).cloned().unwrap_or_default();
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .map(|r| cell(r, i).chars().count())
                .chain([headers[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = widths[i].saturating_sub(c.chars().count());
            if right.contains(&i) {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            } else {
                l.push_str(c);
                if i + 1 < cells.len() {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        l.trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.iter().map(|h| (*h).to_owned()).collect());
    for r in rows {
        out.push_str(&line((0..columns).map(|i| cell(r, i)).collect()));
    }
    out
}

/// The metadata sync table under `--describe` (one row per mirror and sync kind).
#[allow(clippy::print_stdout, reason = "CLI output")]
pub(super) fn print_sync(mirrors: &[DescribedMirror]) {
    if mirrors.iter().all(|m| m.sync.is_empty()) {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let ago = |ms: i64| {
        if ms <= 0 {
            "never".to_owned()
        } else {
            format!("{:.1}s ago", (now - ms) as f64 / 1000.0)
        }
    };
    println!();
    let rows: Vec<Vec<String>> = mirrors
        .iter()
        .flat_map(|m| m.sync.iter().map(move |e| (m, e)))
        .map(|(m, e)| {
            vec![
                m.mirror_name.clone(),
                e.kind.clone(),
                e.interval_ms.to_string(),
                ago(e.last_run_ms),
                ago(e.last_success_ms),
                e.synced.to_string(),
                e.skipped_active.to_string(),
                e.applied_total.to_string(),
                e.errors_total.to_string(),
                e.last_error.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "MIRROR",
                "SYNC",
                "INTERVAL-MS",
                "LAST-RUN",
                "LAST-SUCCESS",
                "SYNCED",
                "SKIPPED-ACTIVE",
                "APPLIED",
                "ERRORS",
                "LAST-ERROR"
            ],
            &[2, 3, 4, 5, 6, 7, 8],
            &rows
        )
    );
}

/// Which instance answered the describe, in words.
pub(super) fn identity_line(e: &kmp_protocol::mirror_api::EngineIdentity) -> String {
    match e.role.as_str() {
        "auto" => {
            let name = if e.instance_id.is_empty() { "?" } else { e.instance_id.as_str() };
            let part = if e.active { "active: it runs the mirror engine" } else { "standby" };
            let active = match (e.active, e.active_instance.is_empty()) {
                (true, _) => String::new(),
                (false, true) => "; active instance unknown".to_owned(),
                (false, false) => format!("; active instance {}", e.active_instance),
            };
            let share = match e.share {
                Some((index, members)) => format!("; copies share {index} of {members}"),
                None => String::new(),
            };
            format!("Answered by instance {name} ({part}{active}; election generation {}{share}).", e.generation)
        }
        "follower" => "Answered by a follower (it copies nothing; it reads the mirror state topic).".to_owned(),
        _ => "Answered by the instance that runs the mirror engine.".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_line_names_the_instance_its_part_and_the_active_one() {
        let mut e = kmp_protocol::mirror_api::EngineIdentity {
            instance_id: "proxy-b".into(),
            role: "auto".into(),
            active: false,
            generation: 7,
            active_instance: "proxy-a".into(),
            share: None,
        };
        assert_eq!(
            identity_line(&e),
            "Answered by instance proxy-b (standby; active instance proxy-a; election generation 7)."
        );
        e.active = true;
        assert_eq!(
            identity_line(&e),
            "Answered by instance proxy-b (active: it runs the mirror engine; election generation 7)."
        );
        e.share = Some((0, 3));
        assert_eq!(
            identity_line(&e),
            "Answered by instance proxy-b (active: it runs the mirror engine; election generation 7; copies share 0 of 3)."
        );
        e.role = "follower".into();
        assert!(identity_line(&e).contains("follower"));
    }

    #[test]
    fn table_columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![
            vec![
                "m".to_owned(),
                "a-rather-long-topic-name-that-overflows-32-chars".to_owned(),
                "0".to_owned(),
                "MIRRORING".to_owned(),
            ],
            vec!["mirror-two".to_owned(), "t".to_owned(), "12345".to_owned(), "FAILED".to_owned()],
        ];
        let text = table(&["MIRROR", "TOPIC", "PARTITION", "STATE"], &[2], &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "MIRROR      TOPIC                                             PARTITION  STATE",
                "m           a-rather-long-topic-name-that-overflows-32-chars          0  MIRRORING",
                "mirror-two  t                                                     12345  FAILED",
            ]
        );
        // Every column starts at the same place on every line.
        let starts = |l: &str| l.find("MIRRORING").or_else(|| l.find("FAILED")).or_else(|| l.find("STATE"));
        assert!(lines.iter().map(|l| starts(l)).collect::<Vec<_>>().windows(2).all(|w| w[0] == w[1]));
        assert_eq!(table(&["A", "B"], &[], &[vec!["x".into(), String::new()]]), "A  B\nx\n", "no trailing blanks");
    }

    #[test]
    fn cells_with_non_ascii_characters_are_measured_in_characters() {
        let rows = vec![vec!["≈1.0 MiB".to_owned(), "x".to_owned()], vec!["—".to_owned(), "y".to_owned()]];
        let text = table(&["BYTES", "Z"], &[0], &rows);
        assert_eq!(text, "   BYTES  Z\n≈1.0 MiB  x\n       —  y\n");
    }
}
