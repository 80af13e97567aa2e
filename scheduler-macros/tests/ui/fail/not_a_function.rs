use scheduler_core::job;

#[job(every = "1m")]
struct Sweep;

fn main() {}
