//! What the swarm's two processes say to each other, one line each: the
//! coordinator process's launcher writes its orders on its stdout, the load
//! generator writes how each worker ended on the coordinator's stdin.
//!
//! ```text
//!  coordinator ──"listening 127.0.0.1:PORT"──────────► load generator (once, first)
//!              ──"start ID HOST SLOT" / "term ID" / "kill ID"──►
//!              ◄──"exit ID STATUS" (a raw wait status: 0, 256 = exit 1, 9 = SIGKILL)──
//! ```

use std::net::SocketAddr;

/// An order of the coordinator's launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// The coordinator listens for workers here.
    Listening(SocketAddr),
    /// Start worker `id` on `slot` of `host`.
    Start { id: u32, host: String, slot: u32 },
    /// Ask worker `id` to stop (SIGTERM).
    Term { id: u32 },
    /// End worker `id` now (SIGKILL).
    Kill { id: u32 },
}

/// A line neither side writes.
#[derive(Debug, thiserror::Error)]
#[error("not a line of the swarm's pipe: {line:?}")]
pub(crate) struct BadLine {
    pub(crate) line: String,
}

impl Order {
    pub(crate) fn line(&self) -> String {
        match self {
            Order::Listening(addr) => format!("listening {addr}"),
            Order::Start { id, host, slot } => format!("start {id} {host} {slot}"),
            Order::Term { id } => format!("term {id}"),
            Order::Kill { id } => format!("kill {id}"),
        }
    }

    pub(crate) fn parse(line: &str) -> Result<Order, BadLine> {
        let bad = || BadLine { line: line.into() };
        let words: Vec<&str> = line.split_whitespace().collect();
        let id = |w: &str| w.parse::<u32>().map_err(|_| bad());
        Ok(match words.as_slice() {
            ["listening", addr] => Order::Listening(addr.parse().map_err(|_| bad())?),
            ["start", i, host, slot] => Order::Start {
                id: id(i)?,
                host: (*host).to_owned(),
                slot: slot.parse().map_err(|_| bad())?,
            },
            ["term", i] => Order::Term { id: id(i)? },
            ["kill", i] => Order::Kill { id: id(i)? },
            _ => return Err(bad()),
        })
    }
}

/// How worker `id` ended, as a raw wait status.
pub(crate) fn exit_line(id: u32, status: i32) -> String {
    format!("exit {id} {status}")
}

pub(crate) fn parse_exit(line: &str) -> Result<(u32, i32), BadLine> {
    let bad = || BadLine { line: line.into() };
    match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["exit", id, status] => Ok((
            id.parse().map_err(|_| bad())?,
            status.parse().map_err(|_| bad())?,
        )),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_line_reads_back_as_written() {
        let orders = [
            Order::Listening("127.0.0.1:4000".parse().unwrap()),
            Order::Start {
                id: 7,
                host: "node-0003".into(),
                slot: 5,
            },
            Order::Term { id: 8 },
            Order::Kill { id: 9 },
        ];
        for o in orders {
            assert_eq!(Order::parse(&o.line()).unwrap(), o);
        }
        assert_eq!(parse_exit(&exit_line(3, 256)).unwrap(), (3, 256));
    }

    #[test]
    fn garbage_is_refused_by_name() {
        for line in ["", "start 1 h", "kill x", "exit 1", "listening nowhere"] {
            assert!(Order::parse(line).is_err(), "{line:?}");
            assert!(parse_exit(line).is_err(), "{line:?}");
        }
    }
}
