//! `elasticrun`: runs a training program as many cooperating processes.

use std::ffi::OsString;
use std::process::ExitCode;

use coordinator::config;
use coordinator::config::cli::{Cli, CliError};
use coordinator::config::serve::Given;
use coordinator::job;
use coordinator::serve::ServeConfig;

#[allow(unsafe_code)]
mod sys;

/// A node's serve options come from its environment and config file only.
static NO_SERVE_OPTIONS: Given = Vec::new();

/// Exit code of every usage error: a command line, environment variable or
/// file elasticrun cannot run.
const USAGE: u8 = 2;

/// `elasticrun serve ...`'s own options (resolved once the config file is
/// read), and the job's as a command line.
fn serve_line() -> Result<Option<(Given, Vec<OsString>)>, ExitCode> {
    let raw: Vec<OsString> = std::env::args_os().collect();
    if raw.get(1).is_none_or(|a| a != "serve") {
        return Ok(None);
    }
    // `serve` runs no command: every word is an option or its value.
    let mut args = Vec::with_capacity(raw.len());
    for a in raw {
        match a.into_string() {
            Ok(a) => args.push(a),
            Err(a) => {
                eprintln!("elasticrun serve: {:?} is not UTF-8", a.to_string_lossy());
                return Err(ExitCode::from(USAGE));
            }
        }
    }
    if args.iter().skip(2).any(|a| a == "--help" || a == "-h") {
        print!("{}{}", config::serve::help(), Cli::help_text());
        return Err(ExitCode::SUCCESS);
    }
    match config::serve::split(&args[2..]) {
        Ok((serve, rest)) => {
            if let Some(word) = rest
                .iter()
                .find(|a| !a.starts_with('-') && is_command(&rest, a))
            {
                eprintln!(
                    "elasticrun serve: it runs no command (workers start by themselves): remove {word:?}"
                );
                return Err(ExitCode::from(USAGE));
            }
            // The job's options, parsed as any job's: clap wants a COMMAND
            // after them, which `serve` has none of (dropped after parsing).
            let mut job = vec![args[0].clone()];
            job.extend(rest);
            job.extend(["--".to_owned(), "serve".to_owned()]);
            Ok(Some((serve, job.into_iter().map(OsString::from).collect())))
        }
        Err(e) => {
            eprintln!("elasticrun serve: {e}");
            Err(ExitCode::from(USAGE))
        }
    }
}

/// What this `elasticrun` is.
enum Role {
    /// A job's launcher and coordinator.
    Job,
    /// `elasticrun serve`, with its own options.
    Serve(Given),
    /// `elasticrun COMMAND` in etcd mode (`ELASTICRUN_ETCD` set): this node's
    /// workers and maybe a replica, which is given these option words.
    Node(Vec<OsString>),
}

/// The command line, or the exit code when there is nothing (more) to run.
fn command_line() -> Result<(Cli, Role), ExitCode> {
    if let Some((given, job)) = serve_line()? {
        let mut cli = parse_cli(job, true)?;
        cli.command.clear();
        return Ok((cli, Role::Serve(given)));
    }
    let args: Vec<OsString> = std::env::args_os().collect();
    let etcd = std::env::var(coordinator::serve::ETCD_VAR).is_ok_and(|v| !v.trim().is_empty());
    let cli = parse_cli(args.clone(), etcd)?;
    if !etcd {
        return Ok((cli, Role::Job));
    }
    // The words between `elasticrun` and the command, for the replica.
    let mut options: Vec<OsString> = args[1..args.len() - cli.command.len()].to_vec();
    if options.last().is_some_and(|a| a == "--") {
        options.pop();
    }
    Ok((cli, Role::Node(options)))
}

/// Whether `word` in `args` stands where a value of the option before it
/// cannot be: `--` before it, or an option before it that takes no value.
fn is_command(args: &[String], word: &str) -> bool {
    let Some(i) = args.iter().position(|a| a == word) else {
        return false;
    };
    match i.checked_sub(1).map(|p| args[p].as_str()) {
        None => true,
        Some("--") => true,
        Some(prev) => !prev.starts_with('-') || prev.contains('='),
    }
}

fn parse_cli(args: Vec<OsString>, serve: bool) -> Result<Cli, ExitCode> {
    match Cli::parse_args(args).map(|mut c| {
        c.serve = serve;
        c
    }) {
        Ok(cli) if cli.check_build => {
            print!("{}", config::check_build());
            Err(ExitCode::SUCCESS)
        }
        Ok(cli) => Ok(cli),
        Err(CliError::Clap(e)) => {
            // clap prints its errors (with the option they resemble) on
            // stderr and the version on stdout.
            let _ = e.print();
            Err(ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(USAGE)))
        }
        Err(CliError::Help { text }) => {
            print!("{text}");
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("elasticrun: {e}");
            Err(ExitCode::from(e.exit_code()))
        }
    }
}

/// The job's configuration and, for `elasticrun serve` (`serve` given), the
/// serve options: command line, environment, then the config file.
fn load(
    cli: &Cli,
    serve: Option<&Given>,
) -> Result<(config::JobConfig, Option<ServeConfig>), String> {
    let path = cli
        .config_file
        .clone()
        .or_else(|| std::env::var_os("ELASTICRUN_CONFIG_FILE").map(Into::into));
    let file = match path {
        Some(p) => {
            let text = coordinator::files::read_text(&p, coordinator::files::MAX_TEXT_FILE)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            config::file::parse(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => config::file::ConfigFile::default(),
    };
    let env = |k: &str| std::env::var(k).ok();
    let serve = match serve {
        Some(given) => Some(
            config::serve::resolve(given, &env, &file.serve).map_err(|e| format!("serve: {e}"))?,
        ),
        None => None,
    };
    let cfg = config::resolve(cli, &env, &file).map_err(|e| e.to_string())?;
    Ok((cfg, serve))
}

fn main() -> ExitCode {
    sys::settle_allocator();
    let (cli, role) = match command_line() {
        Ok(c) => c,
        Err(code) => return code,
    };
    // A node in etcd mode checks the serve options its replica will read.
    let serve = match &role {
        Role::Serve(given) => Some(given),
        Role::Node(_) => Some(&NO_SERVE_OPTIONS),
        Role::Job => None,
    };
    let (cfg, serve) = match load(&cli, serve) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("elasticrun: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(cfg.log_level.filter()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if cfg.log_timestamps {
        fmt.init();
    } else {
        fmt.without_time().init();
    }
    match control::limits::raise_open_files() {
        Ok(l) => tracing::debug!(was = l.was, now = l.now, "open-files limit"),
        Err(e) => tracing::debug!(%e, "cannot raise the open-files limit"),
    }
    let rt = match coordinator::runtime::build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("elasticrun: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let say = job::Say::stderr(cfg.output_timestamps);
    if let Role::Node(options) = role {
        return match rt.block_on(coordinator::serve::node::run(cfg, options, &say)) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                say.line(&e);
                ExitCode::FAILURE
            }
        };
    }
    if let Some(serve) = serve {
        return match rt.block_on(coordinator::serve::run(cfg, serve)) {
            Ok(ending) => ExitCode::from(ending.code()),
            Err(e) => {
                say.line(&e);
                ExitCode::FAILURE
            }
        };
    }
    match rt.block_on(job::run(cfg)) {
        Ok(ending) => ExitCode::from(ending.code()),
        Err(e) => {
            say.line(&e);
            if e.is_usage() {
                ExitCode::from(USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
