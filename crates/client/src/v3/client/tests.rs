use super::*;

#[test]
fn jukebox_pauses_double_from_100_ms_to_2_s_and_stop_after_5_minutes() {
    let ms = |n| Duration::from_millis(n);
    let pauses: Vec<_> = (1..=7).map(|n| jukebox_pause(n, ms(0)).unwrap()).collect();
    assert_eq!(
        pauses,
        [
            ms(100),
            ms(200),
            ms(400),
            ms(800),
            ms(1600),
            ms(2000),
            ms(2000)
        ]
    );
    assert_eq!(jukebox_pause(u32::MAX, ms(0)), Some(JUKEBOX_RETRY_MAX));
    assert_eq!(jukebox_pause(9, JUKEBOX_WAIT_MAX - ms(1)), Some(ms(2000)));
    assert_eq!(jukebox_pause(9, JUKEBOX_WAIT_MAX), None);
    // Tries over the whole wait: about 5 min / 2 s, not a tight loop.
    let (mut n, mut waited) = (1, Duration::ZERO);
    while let Some(p) = jukebox_pause(n, waited) {
        waited += p;
        n += 1;
    }
    assert!((150..=160).contains(&n), "{n} tries");
}

#[test]
fn without_a_portmapper_the_known_port_or_2049_serves_both_programs() {
    assert_eq!(fallback_ports(None, None, None), Some((2049, 2049)));
    assert_eq!(
        fallback_ports(Some(20490), None, None),
        Some((20490, 20490))
    );
    assert_eq!(fallback_ports(None, Some(635), None), Some((635, 635)));
    assert_eq!(fallback_ports(Some(7), None, Some(111)), Some((7, 7)));
    // The user named the portmapper's port: no guessing behind their back.
    assert_eq!(fallback_ports(None, None, Some(20490)), None);
}

#[test]
fn the_unreachable_error_lists_every_address_tried_and_the_remedy() {
    let tried = vec!["cannot reach the portmapper at 127.0.0.1:111: refused".to_string()];
    let e = unreachable(&tried, "cannot connect to 127.0.0.1:2049: refused".into());
    let text = e.to_string();
    assert!(text.contains("127.0.0.1:111"), "{text}");
    assert!(text.contains("127.0.0.1:2049"), "{text}");
    assert!(text.contains("?nfsport=N&mountport=M"), "{text}");
    let plain = unreachable(&[], "cannot connect to 10.0.0.1:2049: x".into()).to_string();
    assert!(!plain.contains("nfsport"), "{plain}");
}

#[test]
fn export_prefixes_are_component_wise() {
    assert!(is_path_prefix("/tmp/exp", "/tmp/exp/a"));
    assert!(is_path_prefix("/tmp/exp/", "/tmp/exp"));
    assert!(is_path_prefix("/", "/x"));
    assert!(!is_path_prefix("/tmp/exp", "/tmp/exp2/a"));
    assert_eq!(strip_export("/tmp/exp/a/b", "/tmp/exp"), "/a/b");
    assert_eq!(strip_export("/tmp/exp", "/tmp/exp"), "/");
}

#[test]
fn transfer_sizes_respect_server_cap_and_pages() {
    assert_eq!(transfer_size(1 << 20, 1 << 20), 1 << 20);
    assert_eq!(transfer_size(64 << 10, 1 << 20), 64 << 10);
    assert_eq!(transfer_size(0, 1 << 20), 1 << 20);
    assert_eq!(transfer_size(100_000, 1 << 20), 98_304);
    assert_eq!(transfer_size(16 << 20, 16 << 20), 4 << 20);
}
