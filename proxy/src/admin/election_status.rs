//! How an `engine.role = "auto"` instance shows where the election stands: the `/readyz` line
//! and the `kmp_engine_*` gauges of `/metrics`. Deciding is the engine's (`election`); serving
//! the endpoints is `admin`'s.

use std::fmt;

use kmp_mirror_engine::ElectionView;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::collectors::family;

/// The `/readyz` line: `engine: active (instance i, generation n)` or
/// `engine: standby (instance i, generation n; active: j)`.
pub(crate) fn readiness_line(v: &ElectionView) -> String {
    let line = role_line(v);
    match &v.problem {
        Some(p) => format!("{line}engine election failing (retrying): {p}\n"),
        None => line,
    }
}

fn role_line(v: &ElectionView) -> String {
    // With shared work every instance copies a share: `; share i of n` says which.
    let share = match (v.share_work, v.share) {
        (true, Some((index, members))) => format!("; share {index} of {members}"),
        (true, None) => "; no share".to_owned(),
        (false, _) => String::new(),
    };
    if v.fenced() {
        format!(
            "engine: fenced (instance {}, generation {}; active: {}): engine.role = \"engine\" expects this instance to be the only engine, but another one is active on this state topic; this one copies and writes nothing{share}\n",
            v.instance_id, v.generation, v.active_instance
        )
    } else if v.active {
        format!("engine: active (instance {}, generation {}{share})\n", v.instance_id, v.generation)
    } else {
        let active = if v.active_instance.is_empty() {
            "unknown"
        } else {
            v.active_instance.as_str()
        };
        format!(
            "engine: standby (instance {}, generation {}; active: {active}{share})\n",
            v.instance_id, v.generation
        )
    }
}

/// The election's families (collected by `collectors`): `engine_instance` and `group` as labels
/// (`instance` is the label Prometheus sets for the scrape target).
pub(crate) fn encode(v: &ElectionView, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let labels = [("engine_instance", v.instance_id.as_str()), ("group", v.group_id.as_str())];
    family(
        e,
        "engine_active",
        "1 while this instance is the elected active mirror engine, 0 while standby",
        [(labels, ConstGauge::new(i64::from(v.active)))],
    )?;
    family(
        e,
        "engine_fenced",
        "1 while this instance, configured engine.role = \"engine\" (the only engine), finds another instance active on its state topic and writes nothing",
        [(labels, ConstGauge::new(i64::from(v.fenced())))],
    )?;
    family(
        e,
        "engine_generation",
        "Generation of the engine election group at the last decision",
        [(labels, ConstGauge::new(i64::from(v.generation)))],
    )?;
    family(
        e,
        "engine_takeovers",
        "Times this instance became the active mirror engine",
        [(labels, ConstCounter::new(v.takeovers))],
    )?;
    if let (true, Some((index, members))) = (v.share_work, v.share) {
        family(
            e,
            "engine_share_index",
            "This instance's place among the generation's members (with engine.share_work it copies that share of the partitions)",
            [(labels, ConstGauge::new(index))],
        )?;
        family(
            e,
            "engine_share_members",
            "Members of the engine group's current generation",
            [(labels, ConstGauge::new(members))],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(v: &ElectionView) -> String {
        crate::admin::collectors::text_of(v, encode)
    }

    fn view(active: bool) -> ElectionView {
        ElectionView {
            instance_id: "kmp-\"a\"".into(),
            group_id: "g".into(),
            active,
            generation: 7,
            active_instance: if active { "kmp-\"a\"".into() } else { String::new() },
            takeovers: 2,
            problem: None,
            share: None,
            share_work: false,
            alone: false,
        }
    }

    #[test]
    fn with_shared_work_readiness_and_gauges_name_the_share() {
        let sharing = ElectionView {
            share_work: true,
            share: Some((1, 3)),
            ..view(false)
        };
        assert_eq!(
            readiness_line(&sharing),
            "engine: standby (instance kmp-\"a\", generation 7; active: unknown; share 1 of 3)\n"
        );
        let text = render(&sharing);
        assert!(
            text.contains("kmp_engine_share_index{engine_instance=\"kmp-\\\"a\\\"\",group=\"g\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("kmp_engine_share_members{engine_instance=\"kmp-\\\"a\\\"\",group=\"g\"} 3\n"),
            "{text}"
        );
        let between = ElectionView { share: None, ..sharing };
        assert!(readiness_line(&between).ends_with("; no share)\n"), "{}", readiness_line(&between));
        assert!(!render(&between).contains("kmp_engine_share_index"), "no share, no gauge");
    }

    #[test]
    fn a_fixed_engine_that_finds_another_active_engine_says_it_is_fenced() {
        let fenced = ElectionView {
            alone: true,
            active_instance: "kmp-b".into(),
            ..view(false)
        };
        let line = readiness_line(&fenced);
        assert!(
            line.starts_with("engine: fenced (instance kmp-\"a\", generation 7; active: kmp-b): engine.role = \"engine\" expects"),
            "{line}"
        );
        let text = render(&fenced);
        assert!(text.contains("kmp_engine_fenced{engine_instance=\"kmp-\\\"a\\\"\",group=\"g\"} 1\n"), "{text}");
        let alone_and_active = ElectionView { alone: true, ..view(true) };
        assert!(!alone_and_active.fenced(), "the active fixed engine is not fenced");
        assert!(render(&alone_and_active).contains("kmp_engine_fenced{engine_instance=\"kmp-\\\"a\\\"\",group=\"g\"} 0\n"));
        let standby = ElectionView {
            active_instance: "kmp-b".into(),
            ..view(false)
        };
        assert!(!standby.fenced(), "an auto standby is not fenced");
        let undecided = ElectionView { alone: true, ..view(false) };
        assert!(!undecided.fenced(), "no active instance known yet");
    }

    #[test]
    fn readiness_and_gauges_name_the_instance_role_and_generation() {
        assert_eq!(readiness_line(&view(true)), "engine: active (instance kmp-\"a\", generation 7)\n");
        assert_eq!(
            readiness_line(&view(false)),
            "engine: standby (instance kmp-\"a\", generation 7; active: unknown)\n"
        );
        let failing = ElectionView {
            problem: Some("destination JoinGroup: Kafka error code 23".into()),
            ..view(false)
        };
        assert!(
            readiness_line(&failing).ends_with("engine election failing (retrying): destination JoinGroup: Kafka error code 23\n"),
            "{}",
            readiness_line(&failing)
        );
        let text = render(&view(false));
        assert!(text.contains("kmp_engine_active{engine_instance=\"kmp-\\\"a\\\"\",group=\"g\"} 0\n"), "{text}");
        assert!(
            text.contains("kmp_engine_generation{engine_instance=\"kmp-\\\"a\\\"\",group=\"g\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("kmp_engine_takeovers_total{engine_instance=\"kmp-\\\"a\\\"\",group=\"g\"} 2\n"),
            "{text}"
        );
    }
}
