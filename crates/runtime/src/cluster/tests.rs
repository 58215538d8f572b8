use super::*;

fn two_layers() -> Cluster {
    Cluster::generate(&LocalLayout {
        hosts: 5,
        procs_per_host: 2,
        layers: 2,
        rack_size: 2,
        ..LocalLayout::default()
    })
    .unwrap()
}

#[test]
fn a_generated_cluster_round_trips_through_toml() {
    let c = two_layers();
    assert_eq!(c.procs(), 10);
    assert_eq!(c.aggregators.len(), 4, "3 racks and a spine");
    assert_eq!(c.attached("tor-2"), vec![8, 9]);
    assert_eq!(c.subtree_procs("spine-0").len(), 10);
    assert_eq!(Cluster::parse(&c.to_toml()).unwrap(), c);
    let one = Cluster::generate(&LocalLayout {
        layers: 1,
        ..LocalLayout::default()
    })
    .unwrap();
    assert_eq!(one.aggregators.len(), 1);
    assert_eq!(one.aggregators[0].parent, None);
}

#[test]
fn depths_follow_the_tree_and_beacon_waves_climb_then_descend() {
    let c = two_layers();
    let (tree, at) = (c.tree(), |name| c.aggregator_index(name).unwrap());
    assert_eq!(tree.up_depth(at("tor-0")), 1);
    assert_eq!(tree.up_depth(at("spine-0")), 2);
    assert_eq!(tree.down_depth(at("spine-0")), 2);
    assert_eq!(tree.down_depth(at("tor-0")), 3);
}

/// Replaces the first occurrence of `from` in a generated file.
fn edited(from: &str, to: &str) -> String {
    let text = two_layers().to_toml();
    assert!(text.contains(from), "{from}");
    text.replacen(from, to, 1)
}

fn error(text: &str) -> ClusterError {
    Cluster::parse(text).unwrap_err()
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// `datagram_len_max`: `"auto"` or bytes in 1,472..=65,507, named with its line when
/// wrong. On loopback `"auto"` is 65,507 bytes and no GSO (one datagram is a whole send);
/// an Ethernet-sized datagram sends 44 at a time with GSO, or one without.
#[test]
fn datagrams_are_as_long_as_the_path_carries_or_the_file_says() {
    let auto = two_layers();
    assert_eq!(
        (auto.datagram_len_max, auto.gso, auto.gro),
        (None, true, true)
    );
    let lo: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let base = DriverConfig::default();
    let cfg = auto.driver_config(&base, &[lo]).unwrap();
    assert_eq!(cfg.coalesce.datagram_len_max, UDP_PAYLOAD_MAX);
    assert_eq!(cfg.coalesce.segments_max, 1);
    cfg.check().unwrap();
    let text = edited("datagram_len_max = \"auto\"", "datagram_len_max = 1472");
    let c = Cluster::parse(&text).unwrap();
    assert_eq!(Cluster::parse(&c.to_toml()).unwrap(), c);
    let cfg = c.driver_config(&base, &[lo]).unwrap();
    assert_eq!(
        (cfg.coalesce.datagram_len_max, cfg.coalesce.segments_max),
        (1_472, 44)
    );
    cfg.check().unwrap();
    let no_gso = Cluster { gso: false, ..c };
    let cfg = no_gso.driver_config(&base, &[lo]).unwrap();
    assert_eq!(cfg.coalesce.segments_max, 1);
    for bad in ["100", "70000", "\"big\""] {
        let text = edited(
            "datagram_len_max = \"auto\"",
            &format!("datagram_len_max = {bad}"),
        );
        let e = error(&text);
        let line = line_of(&text, "datagram_len_max");
        assert_eq!(
            (e.field.as_str(), e.line),
            ("datagram_len_max", Some(line)),
            "{e}"
        );
    }
}

#[test]
fn errors_name_the_field_and_the_line() {
    let text = edited("aggregator = \"tor-1\"", "aggregator = \"tor-7\"");
    let e = error(&text);
    assert_eq!(e.field, "process.aggregator");
    assert_eq!(e.line, Some(line_of(&text, "tor-7")), "{e}");

    let text = edited("parent = \"spine-0\"", "parent = \"spine-9\"");
    let e = error(&text);
    assert_eq!(e.field, "aggregator.parent");
    assert_eq!(e.line, Some(line_of(&text, "spine-9")));

    let text = edited("id = 3", "id = 2");
    let e = error(&text);
    assert_eq!(
        (e.field.as_str(), e.line),
        ("process.id", Some(line_of(&text, "id = 2") + 6))
    );
    assert!(e.message.contains("duplicate"), "{e}");

    let text = edited(
        "beacon_interval = \"1ms\"",
        "beacon_interval = \"1 parsec\"",
    );
    let e = error(&text);
    assert_eq!(e.field, "beacon_interval");
    assert_eq!(e.line, Some(line_of(&text, "parsec")));

    let text = edited("aggregator_mode = \"chip\"", "aggregator_mode = \"cpu\"");
    let e = error(&text);
    assert_eq!(e.field, "aggregator_mode");
    assert_eq!(e.line, Some(line_of(&text, "\"cpu\"")), "{e}");
    let host = edited("aggregator_mode = \"chip\"", "aggregator_mode = \"host\"");
    assert_eq!(
        Cluster::parse(&host).unwrap().roles().aggregator_mode,
        AggregatorMode::Host
    );

    let text = edited("clock = \"monotonic\"", "clock = \"sundial\"");
    let e = error(&text);
    assert_eq!(
        (e.field.as_str(), e.line),
        ("clock", Some(line_of(&text, "sundial")))
    );

    let text = edited("ordered = true", "ordered = true\ncolour = \"blue\"");
    let e = error(&text);
    assert_eq!(e.line, Some(line_of(&text, "colour")), "{e}");
    assert!(e.message.contains("colour"), "{e}");

    let text = edited("addr = \"127.0.0.1:0\"", "addr = \"localhost\"");
    let e = error(&text);
    assert_eq!(
        (e.field.as_str(), e.line),
        ("addr", Some(line_of(&text, "localhost")))
    );
}

#[test]
fn the_aggregators_must_form_one_tree() {
    let text = edited(
        "name = \"spine-0\"",
        "name = \"spine-0\"\nparent = \"tor-0\"",
    );
    let e = error(&text);
    assert_eq!(e.field, "aggregator.parent");
    assert!(e.message.contains("root"), "{e}");
    let mut c = two_layers();
    c.aggregators[0].parent = Some("tor-0".into());
    assert!(c.validate().unwrap_err().message.contains("own parent"));
    let mut c = two_layers();
    c.aggregators.push(AggregatorSpec {
        name: "spare".into(),
        addr: c.controller,
        parent: Some("spine-0".into()),
    });
    assert!(c
        .validate()
        .unwrap_err()
        .message
        .contains("no process below"));
}

#[test]
fn durations_parse_and_format() {
    assert_eq!(parse_duration_ns("250us"), Ok(250_000));
    assert_eq!(parse_duration_ns("2s"), Ok(2_000_000_000));
    assert!(parse_duration_ns("-1ms").is_err());
    assert_eq!(parse_duration_ns("1h"), Ok(3_600_000_000_000));
    assert_eq!(parse_duration_ns("2m"), Ok(120_000_000_000));
    assert!(parse_duration_ns("1d").is_err());
    for ns in [1, 999, 1_000, 1_500, 1_000_000, 3_000_000_000] {
        assert_eq!(parse_duration_ns(&format_duration(ns)), Ok(ns));
    }
}
