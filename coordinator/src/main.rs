//! `elasticrun`: runs a training program as many cooperating processes.

use std::process::ExitCode;

use coordinator::config::{self, LogLevel, cli::Cli};
use coordinator::job;

fn log_filter(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Trace => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warning => "warn",
        LogLevel::Error => "error",
    }
}

fn load() -> Result<config::JobConfig, String> {
    let cli = Cli::parse_args(std::env::args()).unwrap_or_else(|e| e.exit());
    let path = cli
        .config_file
        .clone()
        .or_else(|| std::env::var_os("ELASTICRUN_CONFIG_FILE").map(Into::into));
    let file = match path {
        Some(p) => {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            config::file::parse(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => config::file::ConfigFile::default(),
    };
    config::resolve(&cli, &|k| std::env::var(k).ok(), &file).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cfg = match load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("elasticrun: {e}");
            return ExitCode::from(2);
        }
    };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(log_filter(
            cfg.log_level,
        )))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if cfg.log_timestamps {
        fmt.init();
    } else {
        fmt.without_time().init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("elasticrun: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(job::run(cfg)) {
        Ok(ending) => ExitCode::from(ending.code()),
        Err(e) => {
            eprintln!("elasticrun: {e}");
            ExitCode::FAILURE
        }
    }
}
