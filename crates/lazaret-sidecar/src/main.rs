//! `lazaret-sidecar`: the Network Sidecar that owns the sandbox's network namespace.
//!
//! Built as a static binary (musl) and shipped alone in a `FROM scratch` image. It runs as
//! PID 1 under runc with `CAP_NET_ADMIN` only, and enforces a default-deny egress policy in
//! its network namespace with policy-routing rules (see `policy.rs`), which the agent
//! sandbox (runsc, `--network=host`, `--network container:<sidecar>`) then shares. The
//! policy lives in the kernel: if this process dies, the last policy stays in force.
//! Changes arrive over a Unix control socket (see `control.rs`) and apply live.

mod control;
mod policy;
mod rtnl;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use control::{error_response, ok_response, parse_command, Command, MAX_LINE};
use policy::{diff, Cidr, Policy, RuleSpec, Verdict};
use rtnl::Rtnl;

const USAGE: &str = "\
lazaret-sidecar: Lazaret's Network Sidecar (egress policy for one sandbox)

Usage:
  lazaret-sidecar [--allow CIDR]... [--deny CIDR]... [--control SOCKET]
      Enforce default-deny egress in this network namespace (needs CAP_NET_ADMIN):
      only --allow'ed destinations are reachable (longest prefix wins against
      --deny). With --control, serve line-delimited JSON on SOCKET:
        {\"allow\":\"CIDR\"|[...]}  {\"deny\":\"CIDR\"|[...]}  {\"show\":true}
        {\"set\":{\"allow\":[...],\"deny\":[...]}}
      Prints `ready` on stdout once the policy is in force.
  lazaret-sidecar ctl SOCKET REQUEST...
      Send each JSON REQUEST to a running sidecar; print the answers.
  lazaret-sidecar --version | --help";

/// Exit status for a usage error.
const EXIT_USAGE: u8 = 2;

#[derive(Debug, PartialEq)]
enum Mode {
    Run { policy: Policy, control: Option<PathBuf> },
    Ctl { socket: PathBuf, requests: Vec<String> },
    Version,
    Help,
}

fn parse_args(args: &[String]) -> Result<Mode, String> {
    match args.first().map(String::as_str) {
        Some("--version") | Some("-V") => return Ok(Mode::Version),
        Some("--help") | Some("-h") => return Ok(Mode::Help),
        Some("ctl") => {
            let socket = args.get(1).ok_or("ctl needs SOCKET")?;
            let requests = args[2..].to_vec();
            if requests.is_empty() {
                return Err("ctl needs at least one REQUEST".into());
            }
            return Ok(Mode::Ctl { socket: PathBuf::from(socket), requests });
        }
        _ => {}
    }
    let mut policy = Policy::new();
    let mut denies = Vec::new();
    let mut control = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned()).ok_or(format!("{flag} needs a value"));
        match flag {
            "--allow" => policy.allow(Cidr::parse(&value()?)?),
            "--deny" => denies.push(Cidr::parse(&value()?)?),
            "--control" => {
                let v = value()?;
                if v.is_empty() {
                    return Err("--control needs a path".into());
                }
                control = Some(PathBuf::from(v));
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    denies.into_iter().for_each(|c| policy.deny(c));
    Ok(Mode::Run { policy, control })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args) {
        Ok(Mode::Version) => {
            println!("lazaret-sidecar {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(Mode::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Mode::Ctl { socket, requests }) => ctl(&socket, &requests),
        Ok(Mode::Run { policy, control }) => run(policy, control),
        Err(e) => {
            eprintln!("lazaret-sidecar: {e}\n\n{USAGE}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The policy and the kernel it lives in.
struct Enforcer {
    rtnl: Rtnl,
    policy: Policy,
}

impl Enforcer {
    /// Makes the kernel hold exactly `target`'s rules, then adopts it. Adds go first (denies
    /// before allows), then deletes (allows before denies), so no step is more open than
    /// both the old and the new policy. On failure the old policy is put back.
    fn apply(&mut self, target: Policy) -> io::Result<usize> {
        match self.reconcile(&target.rules()) {
            Ok(n) => {
                self.policy = target;
                Ok(n)
            }
            Err(e) => {
                let old = self.policy.rules();
                if let Err(e2) = self.reconcile(&old) {
                    eprintln!("lazaret-sidecar: could not restore the previous policy: {e2}");
                }
                Err(e)
            }
        }
    }

    fn reconcile(&mut self, desired: &[RuleSpec]) -> io::Result<usize> {
        let current = self.rtnl.dump_rules()?;
        let (mut add, mut del) = diff(&current, desired);
        add.sort_by_key(|r| r.verdict == Verdict::Allow);
        del.sort_by_key(|r| r.verdict == Verdict::Deny);
        for r in &add {
            self.rtnl.add_rule(r).map_err(|e| io::Error::new(e.kind(), format!("adding rule {r}: {e}")))?;
        }
        for r in &del {
            match self.rtnl.del_rule(r) {
                Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                    return Err(io::Error::new(e.kind(), format!("deleting rule {r}: {e}")));
                }
                _ => {}
            }
        }
        let now = self.rtnl.dump_rules()?;
        let mut want = desired.to_vec();
        want.sort_by_key(|r| (!r.dst.is_ipv4(), r.priority, r.dst, r.verdict));
        if now != want {
            return Err(io::Error::other(format!("kernel holds {} rules of ours, expected {}", now.len(), want.len())));
        }
        Ok(now.len())
    }

    fn handle(&mut self, cmd: Command) -> Result<String, String> {
        let mut target = self.policy.clone();
        let what = match &cmd {
            Command::Allow(cs) => {
                cs.iter().for_each(|c| target.allow(*c));
                Some(format!("allow {}", join(cs)))
            }
            Command::Deny(cs) => {
                cs.iter().for_each(|c| target.deny(*c));
                Some(format!("deny {}", join(cs)))
            }
            Command::Set(p) => {
                target = p.clone();
                Some("set".to_string())
            }
            Command::Show => None,
        };
        let started = Instant::now();
        let rules = self.apply(target).map_err(|e| e.to_string())?;
        if let Some(what) = what {
            eprintln!("lazaret-sidecar: {what}: {rules} rules in force ({} us)", started.elapsed().as_micros());
        }
        Ok(ok_response(&self.policy, rules))
    }
}

fn join(cs: &[Cidr]) -> String {
    cs.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")
}

fn run(policy: Policy, control: Option<PathBuf>) -> ExitCode {
    // Before any thread exists, so that every thread inherits the mask and the main thread
    // alone takes these signals with sigwait. PID 1 has no default action for SIGTERM.
    let signals = match block_signals() {
        Ok(s) => s,
        Err(e) => return fail(&format!("blocking signals: {e}")),
    };
    let rtnl = match Rtnl::open() {
        Ok(r) => r,
        Err(e) => return fail(&format!("opening rtnetlink: {e}")),
    };
    let mut enforcer = Enforcer { rtnl, policy: Policy::new() };
    let rules = match enforcer.apply(policy) {
        Ok(n) => n,
        Err(e) => return fail(&format!("installing the egress policy (is CAP_NET_ADMIN there?): {e}")),
    };
    let allowed = join(&enforcer.policy.listed(Verdict::Allow));
    eprintln!("lazaret-sidecar {}: default-deny egress in force, {rules} rules; allowed: [{allowed}]", env!("CARGO_PKG_VERSION"));
    let enforcer = Arc::new(Mutex::new(enforcer));

    if let Some(path) = &control {
        let listener = match bind_control(path) {
            Ok(l) => l,
            Err(e) => return fail(&format!("control socket {}: {e}", path.display())),
        };
        let enforcer = Arc::clone(&enforcer);
        std::thread::spawn(move || serve(listener, enforcer));
    }
    println!("ready");
    let _ = io::stdout().flush();

    loop {
        match wait_signal(&signals) {
            libc::SIGCHLD => reap_children(),
            libc::SIGTERM | libc::SIGINT => {
                if let Some(path) = &control {
                    let _ = std::fs::remove_file(path);
                }
                eprintln!("lazaret-sidecar: stopping; the policy stays in the namespace");
                return ExitCode::SUCCESS;
            }
            _ => {}
        }
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("lazaret-sidecar: {message}");
    ExitCode::FAILURE
}

fn bind_control(path: &Path) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a socket"));
        }
        std::fs::remove_file(path)?;
    }
    // SAFETY: umask only changes this process's file-creation mask.
    let old = unsafe { libc::umask(0o177) };
    let listener = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    listener
}

fn serve(listener: UnixListener, enforcer: Arc<Mutex<Enforcer>>) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                let enforcer = Arc::clone(&enforcer);
                std::thread::spawn(move || {
                    if let Err(e) = serve_client(stream, &enforcer) {
                        eprintln!("lazaret-sidecar: control client: {e}");
                    }
                });
            }
            Err(e) => eprintln!("lazaret-sidecar: accept: {e}"),
        }
    }
}

fn serve_client(stream: UnixStream, enforcer: &Mutex<Enforcer>) -> io::Result<()> {
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.by_ref().take(MAX_LINE as u64).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && n == MAX_LINE {
            writer.write_all(error_response("request line too long").as_bytes())?;
            writer.write_all(b"\n")?;
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let answer = match parse_command(&text) {
            Err(e) => error_response(&e),
            Ok(cmd) => {
                let mut guard = match enforcer.lock() {
                    Ok(g) => g,
                    Err(poisoned) => poisoned.into_inner(),
                };
                guard.handle(cmd).unwrap_or_else(|e| error_response(&e))
            }
        };
        writer.write_all(answer.as_bytes())?;
        writer.write_all(b"\n")?;
    }
}

fn ctl(socket: &Path, requests: &[String]) -> ExitCode {
    let result = (|| -> io::Result<bool> {
        let stream = UnixStream::connect(socket)?;
        let mut writer = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        let mut all_ok = true;
        for request in requests {
            writer.write_all(request.trim().as_bytes())?;
            writer.write_all(b"\n")?;
            let mut answer = String::new();
            reader.read_line(&mut answer)?;
            print!("{answer}");
            let ok = serde_json::from_str::<serde_json::Value>(&answer).map(|v| v["ok"] == true).unwrap_or(false);
            all_ok &= ok;
        }
        Ok(all_ok)
    })();
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => fail(&format!("{}: {e}", socket.display())),
    }
}

fn block_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use, and
    // pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, s);
        }
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(set)
    }
}

fn wait_signal(set: &libc::sigset_t) -> libc::c_int {
    let mut sig: libc::c_int = 0;
    // SAFETY: set was initialised by block_signals; sig is a valid out-pointer.
    let rc = unsafe { libc::sigwait(set, &mut sig) };
    if rc != 0 {
        0
    } else {
        sig
    }
}

/// As PID 1, reap whatever `podman exec` left behind.
fn reap_children() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG and a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn parses_run_arguments() {
        let Ok(Mode::Run { policy, control }) =
            parse_args(&args(&["--allow", "10.0.0.0/8", "--deny=10.1.0.0/16", "--allow=fd00::1", "--control", "/run/x.sock"]))
        else {
            panic!("did not parse");
        };
        assert_eq!(control, Some(PathBuf::from("/run/x.sock")));
        assert_eq!(policy.listed(Verdict::Allow).len(), 2);
        assert_eq!(policy.listed(Verdict::Deny), vec![Cidr::parse("10.1.0.0/16").unwrap()]);
        assert_eq!(parse_args(&[]), Ok(Mode::Run { policy: Policy::new(), control: None }));
    }

    #[test]
    fn refuses_bad_arguments() {
        for bad in [&["--allow"][..], &["--allow", "nope"], &["--control="], &["--bogus"], &["ctl"], &["ctl", "/s"], &["allow"]] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse_args(&args(&["--version"])), Ok(Mode::Version));
        assert_eq!(parse_args(&args(&["ctl", "/s", "{\"show\":true}"])).map(|m| matches!(m, Mode::Ctl { .. })), Ok(true));
    }
}
