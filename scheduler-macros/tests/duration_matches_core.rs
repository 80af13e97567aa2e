//! The macro's duration parser accepts exactly what `scheduler_core::parse_duration`
//! accepts, with the same result: the macro crate keeps its own copy because core
//! depends on it.

#[path = "../src/duration.rs"]
mod duration;

/// Every string of up to `len` characters over `alphabet`.
fn strings(alphabet: &[char], len: usize) -> Vec<String> {
    let mut all = vec![String::new()];
    let mut last = vec![String::new()];
    for _ in 0..len {
        last = last
            .iter()
            .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
            .collect();
        all.extend(last.iter().cloned());
    }
    all
}

fn assert_same(input: &str) {
    assert_eq!(
        duration::parse(input).ok(),
        scheduler_core::parse_duration(input).ok(),
        "the two parsers disagree on {input:?}"
    );
}

#[test]
fn same_on_every_short_string() {
    let alphabet = ['0', '1', '9', 's', 'm', 'h', 'd', 'x', '.', ' ', '-'];
    for input in strings(&alphabet, 5) {
        assert_same(&input);
    }
}

#[test]
fn same_on_edge_cases() {
    let cases = [
        "30s",
        "1h30m",
        "500ms",
        "2d",
        " 30s ",
        "\t1m\n",
        "1m1s1ms",
        "0s",
        "000010s",
        "1.5s",
        "1h 30m",
        "30sec",
        "30S",
        "30µs",
        "ms",
        "18446744073709551615ms",
        "18446744073709551615s",
        "18446744073709551616s",
        "18446744073709551615m",
        "213503982334601d",
        "213503982334602d",
        "18446744073709551615s1s",
        "18446744073709551615s999ms",
        "18446744073709551615s1000ms",
    ];
    for input in cases {
        assert_same(input);
    }
}
