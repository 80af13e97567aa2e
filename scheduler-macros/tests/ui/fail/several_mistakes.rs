// Every mistake is reported at once: the arguments' and the signature's.
use scheduler_core::job;

#[job(every = "1x")]
fn sweep() {}

fn main() {}
