//! Reaching etcd: the endpoint list and a connection that is known to work
//! (one request answered) within a deadline.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::time::Instant;

use crate::{EtcdError, REQUEST_TIMEOUT};

/// etcd's client URLs, as `--etcd` and `ELASTICRUN_ETCD` give them:
/// `http://host:port` (or `host:port`), comma-separated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints(Vec<String>);

impl Endpoints {
    pub fn parse(list: &str) -> Result<Self, EtcdError> {
        let bad = |what: &str, why| EtcdError::Invalid {
            kind: "etcd endpoint",
            what: what.to_owned(),
            why,
        };
        let mut out = Vec::new();
        for e in list.split(',').map(str::trim) {
            if e.is_empty() {
                return Err(bad(list, "an endpoint is empty"));
            }
            let hostport = match e.split_once("://") {
                Some(("http", rest)) => rest,
                Some(("https", _)) => {
                    return Err(bad(e, "TLS to etcd is not supported yet: use http://"));
                }
                Some(_) => return Err(bad(e, "the scheme must be http://")),
                None => e,
            };
            let (host, port) = hostport
                .rsplit_once(':')
                .ok_or_else(|| bad(e, "it must be host:port"))?;
            if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad(e, "it must be host:port with a port from 1 to 65535"));
            }
            out.push(format!("http://{hostport}"));
        }
        Ok(Endpoints(out))
    }

    pub fn urls(&self) -> &[String] {
        &self.0
    }
}

impl std::fmt::Display for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

/// A client over every endpoint that has answered one request, trying with
/// backoff until `within` has passed. Calls fail on a member that has lost
/// its quorum rather than hang (`require_leader`).
pub async fn connect(endpoints: &Endpoints, within: Duration) -> Result<Client, EtcdError> {
    let deadline = Instant::now() + within;
    let mut backoff = Duration::from_millis(50);
    loop {
        let last = match try_connect(endpoints).await {
            Ok(c) => return Ok(c),
            Err(e) => e,
        };
        if Instant::now() + backoff >= deadline {
            return Err(EtcdError::Unreachable {
                endpoints: endpoints.to_string(),
                after: within,
                why: last,
            });
        }
        tracing::debug!(%endpoints, %last, "etcd not reachable yet");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

async fn try_connect(endpoints: &Endpoints) -> Result<Client, String> {
    let options = ConnectOptions::new()
        .with_connect_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(Duration::from_secs(2), REQUEST_TIMEOUT)
        .with_keep_alive_while_idle(true)
        .with_require_leader(true);
    let connecting = Client::connect(endpoints.urls(), Some(options));
    let mut client = match tokio::time::timeout(REQUEST_TIMEOUT, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no connection within {REQUEST_TIMEOUT:?}")),
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, client.status()).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {REQUEST_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn endpoint_lists() {
        let e = Endpoints::parse("http://10.0.0.1:2379, etcd-1.etcd:2379").unwrap();
        assert_eq!(
            e.urls(),
            ["http://10.0.0.1:2379", "http://etcd-1.etcd:2379"]
        );
        for bad in [
            "",
            "a:1,",
            "https://a:1",
            "ftp://a:1",
            "a",
            ":1",
            "a:0",
            "a:x",
            "a:70000",
        ] {
            assert!(
                matches!(Endpoints::parse(bad), Err(EtcdError::Invalid { .. })),
                "{bad}"
            );
        }
    }
}
