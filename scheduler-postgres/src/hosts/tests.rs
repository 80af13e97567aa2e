#![allow(clippy::expect_used, clippy::unwrap_used)]

use super::*;

const FIVE: Duration = Duration::from_secs(5);

fn hosts(url: &str) -> Hosts {
    Hosts::parse(url, FIVE)
        .expect("parses")
        .expect("several hosts")
}

fn reason(url: &str) -> String {
    match Hosts::parse(url, FIVE) {
        Err(Error::InvalidUrl { reason }) => reason,
        other => panic!("{url}: expected InvalidUrl, got {other:?}"),
    }
}

#[test]
fn a_plain_url_is_left_to_sqlx() {
    for url in [
        "postgres://app@db/app",
        "postgres://app:pw@db:6543/app?sslmode=disable&application_name=x",
        "postgres:///app?host=/var/run/postgresql",
    ] {
        assert!(Hosts::parse(url, FIVE).expect("parses").is_none(), "{url}");
    }
}

#[test]
fn hosts_in_the_authority_keep_their_order_and_ports() {
    let h = hosts(
        "postgres://u:pw@h1:5433,h2,[::1]:5435/db?target_session_attrs=read-write&sslmode=disable",
    );
    assert_eq!(h.describe(), "h1:5433,h2:5432,::1:5435");
    assert_eq!(h.attrs, SessionAttrs::ReadWrite);
    assert_eq!(h.per_host, FIVE);
    assert!(!h.random);
    assert_eq!(h.base_url, "postgres://u:pw@h1/db?sslmode=disable");
    let first = h.targets.first().expect("first");
    assert_eq!(first.get_username(), "u");
    assert_eq!(first.get_database(), Some("db"));
}

#[test]
fn hosts_in_the_query_take_one_port_or_one_each() {
    let h = hosts("postgres://u@/db?host=a,b&port=6000,6001&load_balance_hosts=random");
    assert_eq!(h.describe(), "a:6000,b:6001");
    assert!(h.random);
    assert_eq!(h.attrs, SessionAttrs::Any);
    let h = hosts(
        "postgresql:///db?host=a,b,c&port=7000&target_session_attrs=primary&connect_timeout=3",
    );
    assert_eq!(h.describe(), "a:7000,b:7000,c:7000");
    assert_eq!(h.attrs, SessionAttrs::Primary);
    assert_eq!(h.per_host, Duration::from_secs(3));
    // libpq takes one second as two, and zero as no bound of its own.
    assert_eq!(
        hosts("postgres://a,b/db?connect_timeout=1").per_host,
        Duration::from_secs(2)
    );
    assert_eq!(hosts("postgres://a,b/db?connect_timeout=0").per_host, FIVE);
    let h = hosts("postgres:///db?host=%2Ftmp%2Fs1,%2Ftmp%2Fs2&port=5432");
    assert_eq!(h.describe(), "/tmp/s1,/tmp/s2");
}

#[test]
fn one_host_with_target_session_attrs_is_a_list_of_one() {
    let h = hosts("postgres://u@db:5444/app?target_session_attrs=read-write");
    assert_eq!(h.describe(), "db:5444");
    assert_eq!(h.base_url, "postgres://u@db/app");
}

#[test]
fn bad_lists_are_refused_before_anything_runs() {
    let r = reason("postgres://u@/db?host=a,b,c&port=1,2");
    assert!(r.contains("3 hosts but 2 ports"), "{r}");
    let r = reason("postgres://u@a,b/db?target_session_attrs=read-only");
    assert!(
        r.contains("target_session_attrs=read-only is not supported"),
        "{r}"
    );
    assert!(r.contains("any, read-write or primary"), "{r}");
    let r = reason("postgres://u@a,,b/db");
    assert!(r.contains("empty host"), "{r}");
    let r = reason("postgres://u@a:1,b:x/db");
    assert!(r.contains("invalid port number \"x\""), "{r}");
    let r = reason("postgres://a,b/db?load_balance_hosts=sometimes");
    assert!(r.contains("load_balance_hosts=sometimes"), "{r}");
    let r = reason("postgres://a,b/db?connect_timeout=soon");
    assert!(r.contains("connect_timeout=soon"), "{r}");
}

#[test]
fn random_order_is_a_permutation() {
    let h = hosts("postgres://a,b,c,d/db?load_balance_hosts=random");
    for _ in 0..20 {
        let mut order = h.order();
        order.sort_unstable();
        assert_eq!(order, vec![0, 1, 2, 3]);
    }
    assert_eq!(hosts("postgres://a,b,c/db").order(), vec![0, 1, 2]);
}
