//! Reading what an elastic job of `train` printed: rank 0's step lines,
//! every rank's done line, elasticrun's generation lines; and the checks
//! the chaos tests make of them.

use serde_json::Value;

use crate::Finished;

/// A `{"event":"step",...}` line of rank 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub step: u64,
    pub pid: i32,
    pub world_size: u64,
}

/// The text after `[ID]<stdout>:`, or the whole line.
fn payload(line: &str) -> &str {
    line.split_once("]<stdout>:").map_or(line, |(_, rest)| rest)
}

fn events<'a>(stdout: &'a str, kind: &'a str) -> impl Iterator<Item = Value> + 'a {
    let tag = format!("\"event\":\"{kind}\"");
    stdout
        .lines()
        .map(payload)
        .filter(move |l| l.starts_with('{') && l.contains(&tag))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
}

/// Every step line in `stdout`, in order.
pub fn steps(stdout: &str) -> Vec<Step> {
    events(stdout, "step")
        .map(|v| Step {
            step: v["step"].as_u64().unwrap(),
            pid: i32::try_from(v["pid"].as_i64().unwrap()).unwrap(),
            world_size: v["world_size"].as_u64().unwrap(),
        })
        .collect()
}

/// The world size of every step the final weights went through, from step
/// 1: rank 0's last line for each step number (a step undone by a rollback
/// is done and logged again). A rank 0 killed after a step completed but
/// before it printed the step leaves a gap where the next rank 0 takes over
/// from that step's commit: the missing steps ran on the previous line's
/// world.
pub fn final_world_sizes(stdout: &str) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut last: Option<Step> = None;
    for s in steps(stdout) {
        let i = usize::try_from(s.step).unwrap() - 1;
        sizes.truncate(i);
        if let Some(prev) = last.filter(|p| p.pid != s.pid && sizes.len() < i) {
            sizes.resize(i, prev.world_size);
        }
        last = Some(s);
        assert_eq!(
            sizes.len(),
            i,
            "step {} came out of order\n{stdout}",
            s.step
        );
        sizes.push(s.world_size);
    }
    sizes
}

/// Every done line in `stdout`.
pub fn done_lines(stdout: &str) -> Vec<Value> {
    events(stdout, "done").collect()
}

/// (generation, workers) of every `elasticrun: generation G: N workers` line.
pub fn generations(stderr: &str) -> Vec<(u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("elasticrun: generation ")?;
            let (g, rest) = rest.split_once(": ")?;
            let n = rest.split(' ').next()?;
            Some((g.parse().ok()?, n.parse().ok()?))
        })
        .collect()
}

/// Checks the end of a successful run: its last generation has `world_size`
/// workers, one done line per rank of it, and every rank holds the same
/// weights after exactly `steps` optimizer steps, all committed. Returns the
/// checksum of the weights.
pub fn check_done(run: &Finished, world_size: u64, steps: u64) -> String {
    let ctx = || format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    if let Some(last) = generations(&run.stderr).last() {
        assert_eq!(last.1, world_size, "{}", ctx());
    }
    let done = done_lines(&run.stdout);
    let mut ranks: Vec<u64> = done.iter().map(|d| d["rank"].as_u64().unwrap()).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, (0..world_size).collect::<Vec<_>>(), "{}", ctx());
    let state = done[0]["state"].as_str().unwrap().to_owned();
    for d in &done {
        assert_eq!(d["world_size"].as_u64(), Some(world_size), "{d}\n{}", ctx());
        assert_eq!(d["steps"].as_u64(), Some(steps), "{d}\n{}", ctx());
        assert_eq!(d["committed_steps"].as_u64(), Some(steps), "{d}\n{}", ctx());
        assert_eq!(d["state"].as_str(), Some(state.as_str()), "{d}\n{}", ctx());
    }
    state
}

/// Checks that rank 0's step numbers go up by one from line to line: no step
/// was undone (as a rollback to the last commit would) or repeated.
pub fn check_no_rollback(stdout: &str) {
    let s = steps(stdout);
    for w in s.windows(2) {
        assert_eq!(
            w[1].step,
            w[0].step + 1,
            "{:?} then {:?}\n{stdout}",
            w[0],
            w[1]
        );
    }
}

/// Checks that elasticrun said (in `stderr`) it stopped every worker for the
/// reset limit `limit`, reached.
pub fn check_reset_limit_reached(stderr: &str, limit: u32) {
    let line = format!(
        "elasticrun: reset limit reached: the job already reset {limit} times \
         (--reset-limit {limit}); stopping every worker"
    );
    assert!(stderr.contains(&line), "{stderr}");
}

/// Checks that elasticrun said (in `stderr`) it stopped every worker after
/// waiting `waited` (the start of the seconds it prints) with fewer than
/// `min_np` ready.
pub fn check_too_few_for_elastic_timeout(stderr: &str, min_np: u64, waited: &str) {
    let failure = stderr
        .lines()
        .find(|l| l.starts_with("elasticrun: too few workers: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        failure.contains(&format!("ready, --min-np is {min_np}; waited {waited}"))
            && failure.ends_with("s (--elastic-timeout); stopping every worker"),
        "{failure}"
    );
}
