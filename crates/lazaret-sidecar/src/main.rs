//! `lazaret-sidecar`: the Network Sidecar that owns the sandbox's network namespace.
//!
//! Built as a static binary (musl) and shipped alone in a `FROM scratch` image. It runs as
//! PID 1 under runc with `CAP_NET_ADMIN` (and `CAP_NET_BIND_SERVICE` for DNS), and enforces
//! a default-deny egress policy in its network namespace with policy-routing rules (see
//! `policy.rs`, `enforcer.rs`) backed by a netfilter output filter (`nft.rs`), which the
//! agent sandbox (runsc, `--network=host`, `--network container:<sidecar>`) then shares.
//! The policy lives in the kernel: if this process dies, the last policy stays in force.
//! Changes arrive over a Unix control socket (see `control.rs`) and apply live: entries
//! added (for good or for a time), revoked, or the whole policy replaced. The
//! sandbox's only resolver is this process (`dns.rs`): it answers allowlisted names and
//! opens their addresses for their TTL (internal ones only where a CIDR allow covers
//! them, or with `--private-answers allow`: `addresses.rs`), and can hold a question
//! for a name on no allow entry until one comes (`hold`).

use lazaret_sidecar::{blocked, control, dns, enforcer, inject, nft, policy, rtnl};

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use control::{error_response, parse_command, reply_line, Command, Entry};
use dns::Shared;
use enforcer::{Enforcer, PrivateAnswers, State};
use inject::Injector;
use lazaret_protocol::sidecar::{SidecarReply, MAX_LINE};
use lazaret_protocol::EntryVerdict;
use policy::Cidr;
use rtnl::Rtnl;

const USAGE: &str = "\
lazaret-sidecar: Lazaret's Network Sidecar (egress policy for one sandbox)

Usage:
  lazaret-sidecar [--allow ENTRY]... [--deny ENTRY]... [--dns-upstream ADDRESS]...
                  [--protect ADDRESS|CIDR]... [--protect-net CIDR]...
                  [--private-answers refuse|allow] [--control SOCKET]
      Enforce default-deny egress in this network namespace (policy-routing rules
      and an nf_tables output filter that mirrors them; needs CAP_NET_ADMIN, and
      CAP_NET_BIND_SERVICE for DNS): only --allow'ed destinations are
      reachable. An ENTRY is a CIDR or address (longest prefix wins against
      --deny), one protocol and port of a host address, `10.9.0.7/32 tcp/8081`
      (`udp/53`, or an IP protocol number without a port: only that opens or
      closes; a deny wins where it meets a CIDR entry), or a DNS name,
      `github.com` or `*.npmjs.org`: the resolver this
      serves on 127.0.0.1:53 answers allowlisted names from the upstream
      resolvers (--dns-upstream, else the nameservers of /etc/resolv.conf) and
      opens the answered addresses for their TTL; it refuses every other
      question (after a hold, see `hold` below). An answer never opens loopback, link-local, multicast,
      broadcast, 0.0.0.0/8 or IPv4-compatible IPv6 addresses; nor, unless a
      CIDR allow covers them or --private-answers is `allow`, private, CGNAT,
      ULA or other special-purpose addresses, or the host's networks
      (--protect-net, the prefixes of its interfaces). A --protect'ed address
      or network (the host's own addresses, rootless podman's user-mode
      network) stays unreachable under wider allow entries; only an allow of
      exactly that address or network opens it. With --control, serve
      line-delimited JSON on SOCKET:
        {\"type\":\"allow\",\"entries\":[ENTRY...]}  {\"type\":\"deny\",\"entries\":[ENTRY...]}
          (with \"forMs\":MS, 1 to 86400000, the entries end on their own then)
        {\"type\":\"revoke\",\"entries\":[ENTRY...]} (each must be an allow or deny entry
          exactly; what it opened closes, established flows included)
        {\"type\":\"hold\",\"ms\":MS} (0 to 30000: a question for a name on no allow
          entry waits that long for an allow of it before it is refused; while
          above 0, a connection straight to an address no entry covers is refused
          at once, TCP with a reset, and reported as a connectBlocked event)
        {\"type\":\"set\",\"allow\":[...],\"deny\":[...],\"privateAnswers\":\"refuse\"|\"allow\"}
        {\"type\":\"protect\",\"addresses\":[...],\"networks\":[...]}
        {\"type\":\"credentials\",\"endpoints\":[{\"origin\":\"https://HOST\",\"port\":PORT,
          \"header\":\"x-api-key\",\"value\":...}]} (serve plain HTTP/1.1 on
          127.0.0.1:PORT and forward each request over TLS to HOST only, with the
          header set to the value; the CA bundle is /etc/lazaret/ca-bundle.pem)
        {\"type\":\"show\"}  {\"type\":\"watch\"} (then one event per line)
      Answers: {\"type\":\"policy\",...} with the policy in force, or
      {\"type\":\"error\",\"message\":...} (nothing changed).
      Prints `ready` on stdout once the policy is in force.
  lazaret-sidecar supervise [ARGUMENTS]...
      As the container's PID 1: run the sidecar with ARGUMENTS as a child, and
      start it again whenever it ends other than by SIGTERM (the coordinator
      then gives it back the live policy). PID 1 holds the network namespace
      the sandbox shares; the kernel keeps the last rules in force meanwhile.
  lazaret-sidecar ctl SOCKET REQUEST...
      Send each JSON REQUEST to a running sidecar; print the answers.
  lazaret-sidecar --version | --help";

/// Exit status for a usage error.
const EXIT_USAGE: u8 = 2;

#[derive(Debug, Default, PartialEq)]
struct RunOptions {
    allow: Vec<Entry>,
    deny: Vec<Entry>,
    upstreams: Vec<SocketAddr>,
    /// Out of reach under wide allows: the host's addresses, rootless podman's
    /// user-mode network.
    protected: Vec<Cidr>,
    protected_networks: Vec<Cidr>,
    private_answers: PrivateAnswers,
    control: Option<PathBuf>,
}

#[derive(Debug, PartialEq)]
enum Mode {
    Run(RunOptions),
    /// The enforcer's arguments, checked.
    Supervise(Vec<String>),
    Ctl {
        socket: PathBuf,
        requests: Vec<String>,
    },
    Version,
    Help,
}

fn parse_args(args: &[String]) -> Result<Mode, String> {
    match args.first().map(String::as_str) {
        Some("--version") | Some("-V") => return Ok(Mode::Version),
        Some("--help") | Some("-h") => return Ok(Mode::Help),
        Some("supervise") => {
            let arguments = args[1..].to_vec();
            return match parse_args(&arguments)? {
                Mode::Run(_) => Ok(Mode::Supervise(arguments)),
                _ => Err("supervise takes the options of a run".into()),
            };
        }
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
    let mut options = RunOptions::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned()).ok_or(format!("{flag} needs a value"));
        match flag {
            "--allow" => options.allow.push(Entry::parse(&value()?)?),
            "--deny" => options.deny.push(Entry::parse(&value()?)?),
            "--dns-upstream" => options.upstreams.push(parse_upstream(&value()?)?),
            "--protect" => {
                let v = value()?;
                options.protected.push(Cidr::parse(&v).map_err(|e| format!("--protect: {e}"))?);
            }
            "--protect-net" => {
                let v = value()?;
                options.protected_networks.push(Cidr::parse(&v).map_err(|e| format!("--protect-net: {e}"))?);
            }
            "--private-answers" => {
                options.private_answers = {
                    let text = value()?;
                    PrivateAnswers::parse(&text).ok_or_else(|| format!("--private-answers: \"refuse\" or \"allow\", not {text:?}"))?
                }
            }
            "--control" => {
                let v = value()?;
                if v.is_empty() {
                    return Err("--control needs a path".into());
                }
                options.control = Some(PathBuf::from(v));
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Mode::Run(options))
}

/// `10.0.0.53`, `fd00::53`, or with a port: `10.0.0.53:5353`, `[fd00::53]:5353`.
fn parse_upstream(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Ok(SocketAddr::new(address, 53));
    }
    text.parse::<SocketAddr>().map_err(|_| format!("--dns-upstream {text:?} is not an IP address (optionally with :port)"))
}

/// The nameservers of a resolv.conf, except loopback ones (this namespace's loopback
/// is the sidecar itself).
fn resolv_conf_nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse::<IpAddr>().ok())
        .filter(|address| !address.is_loopback())
        .map(|address| SocketAddr::new(address, 53))
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args) {
        Ok(Mode::Version) => {
            println!("lazaret-sidecar {} (commit {})", env!("CARGO_PKG_VERSION"), env!("LAZARET_GIT_COMMIT"));
            ExitCode::SUCCESS
        }
        Ok(Mode::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Mode::Ctl { socket, requests }) => ctl(&socket, &requests),
        Ok(Mode::Run(options)) => run(options),
        Ok(Mode::Supervise(arguments)) => supervise(&arguments),
        Err(e) => {
            eprintln!("lazaret-sidecar: {e}\n\n{USAGE}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Handles one control request; `Watch` is handled by the caller.
fn handle(shared: &Shared, injector: &Injector, command: Command) -> Result<String, String> {
    let mut enforcer = shared.enforcer();
    let started = Instant::now();
    let (what, result) = match command {
        Command::Credentials(endpoints) => {
            injector.set(&endpoints)?;
            let origins: Vec<String> = endpoints.iter().map(|endpoint| format!("{} on port {}", endpoint.origin, endpoint.port)).collect();
            (
                Some(format!("credential endpoints: {}", if origins.is_empty() { "none".to_owned() } else { origins.join(", ") })),
                enforcer.rule_count(),
            )
        }
        Command::Allow(entries, life) => {
            let what = format!("allow {}{}", join(&entries), for_text(life));
            (Some(what), enforcer.apply_entries(&entries, EntryVerdict::Allow, life, started))
        }
        Command::Deny(entries, life) => {
            let what = format!("deny {}{}", join(&entries), for_text(life));
            (Some(what), enforcer.apply_entries(&entries, EntryVerdict::Deny, life, started))
        }
        Command::Revoke(entries) => (Some(format!("revoke {}", join(&entries))), enforcer.revoke(&entries)),
        Command::Hold(hold) => (Some(format!("hold {} ms", hold.as_millis())), enforcer.change(|state| state.hold = hold)),
        Command::Set(cidrs, names, private_answers) => (
            Some(format!("set (private answers: {})", private_answers.as_str())),
            enforcer.change(|state| {
                state.cidrs = cidrs;
                state.names = names;
                state.private_answers = private_answers;
            }),
        ),
        Command::Protect(addresses, networks) => {
            let what = format!("protect {} host addresses, {} host networks", addresses.len(), networks.len());
            (Some(what), enforcer.protect(addresses, networks))
        }
        Command::Show | Command::Watch => (None, enforcer.rule_count()),
    };
    let rules = result.map_err(|e| e.to_string())?;
    if let Some(what) = what {
        eprintln!("lazaret-sidecar: {what}: {rules} rules in force ({} us)", started.elapsed().as_micros());
        // Held questions look at the policy again.
        shared.changed.bump();
    }
    let mut policy = enforcer.snapshot(rules, Instant::now());
    policy.credentials = injector.status();
    Ok(reply_line(&SidecarReply::Policy(policy)))
}

/// ` for N ms` of a timed change, else nothing.
fn for_text(life: Option<std::time::Duration>) -> String {
    life.map(|life| format!(" for {} ms", life.as_millis())).unwrap_or_default()
}

fn join(entries: &[Entry]) -> String {
    entries.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(" ")
}

fn run(options: RunOptions) -> ExitCode {
    // Before any thread exists, so that every thread inherits the mask and the main thread
    // alone takes these signals with sigwait. PID 1 has no default action for SIGTERM.
    let signals = match block_signals() {
        Ok(s) => s,
        Err(e) => return fail(&format!("blocking signals: {e}")),
    };
    let mut rtnl = match Rtnl::open() {
        Ok(r) => r,
        Err(e) => return fail(&format!("opening rtnetlink: {e}")),
    };
    // The drop link and its log make direct connections to unlisted addresses into
    // questions (`blocked.rs`); without them such connections are refused as before.
    let mut drop_link = match rtnl.ensure_drop_link().and_then(|index| blocked::Log::open().map(|log| (index, log))) {
        Ok(found) => Some(found),
        Err(e) => {
            eprintln!("lazaret-sidecar: warning: direct connections to unlisted addresses will not be offered as requests: {e}");
            None
        }
    };
    let mut state =
        State { private_answers: options.private_answers, host_networks: options.protected_networks.clone(), ..State::default() };
    state.add_entries(&options.allow, EntryVerdict::Allow, None, Instant::now());
    state.add_entries(&options.deny, EntryVerdict::Deny, None, Instant::now());
    let upstreams = if options.upstreams.is_empty() {
        resolv_conf_nameservers(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
    } else {
        options.upstreams.clone()
    };
    // The resolver's socket first: a policy without it would leave names unanswered.
    let resolver = match UdpSocket::bind(dns::LISTEN) {
        Ok(socket) => socket,
        Err(e) => return fail(&format!("DNS on {} (is CAP_NET_BIND_SERVICE there?): {e}", dns::LISTEN)),
    };
    let installed = nft::Nft::open().and_then(|mut nft| {
        if let Some((index, _)) = &drop_link {
            match nft.install_with_drop_link(*index) {
                Ok(()) => return Ok(nft),
                // (A kernel without nft's limit, log or reject: the filter as before.)
                Err(e) => {
                    eprintln!(
                        "lazaret-sidecar: warning: direct connections to unlisted addresses will not be offered as requests: \
                         the netfilter rules for the drop link: {e}"
                    );
                    drop_link = None;
                }
            }
        }
        nft.install()?;
        Ok(nft)
    });
    let nft = match installed {
        Ok(nft) => nft,
        Err(e) => return fail(&format!("installing the netfilter output filter (nf_tables): {e}")),
    };
    let (mut enforcer, rules) = match Enforcer::start(rtnl, nft, state, upstreams, options.protected.clone()) {
        Ok(started) => started,
        Err(e) => return fail(&format!("installing the egress policy (is CAP_NET_ADMIN there?): {e}")),
    };
    let log = drop_link.map(|(_, log)| {
        enforcer.use_drop_link();
        log
    });
    let snapshot = enforcer.snapshot(rules, Instant::now());
    eprintln!(
        "lazaret-sidecar {}: default-deny egress in force, {rules} rules; allowed: {}; DNS on {} via {}",
        env!("CARGO_PKG_VERSION"),
        snapshot.allow.join(" "),
        dns::LISTEN,
        snapshot.upstreams.join(" ")
    );
    if !enforcer.state().names.is_empty() && enforcer.upstreams().is_empty() {
        eprintln!(
            "lazaret-sidecar: warning: names are allowlisted but no upstream resolver is known (--dns-upstream); they will not resolve"
        );
    }
    let shared = Arc::new(Shared::new(enforcer));
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || dns::serve(resolver, shared));
    }
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || dns::expiry_loop(shared));
    }
    if let Some(log) = log {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || blocked::serve(log, shared));
    }

    let injector = {
        let shared = Arc::clone(&shared);
        Arc::new(Injector::new(Arc::new(move |event| shared.events.emit(event))))
    };

    if let Some(path) = &options.control {
        let listener = match bind_control(path) {
            Ok(l) => l,
            Err(e) => return fail(&format!("control socket {}: {e}", path.display())),
        };
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || serve(listener, shared, injector));
    }
    println!("ready");
    let _ = io::stdout().flush();

    loop {
        match wait_signal(&signals) {
            libc::SIGCHLD => reap_children(),
            libc::SIGTERM | libc::SIGINT => {
                if let Some(path) = &options.control {
                    let _ = std::fs::remove_file(path);
                }
                eprintln!("lazaret-sidecar: stopping; the policy stays in the namespace");
                return ExitCode::SUCCESS;
            }
            _ => {}
        }
    }
}

/// How soon an ended enforcer is started again, at first and at most.
const RESTART_DELAY: std::time::Duration = std::time::Duration::from_millis(100);
const RESTART_DELAY_MAX: std::time::Duration = std::time::Duration::from_secs(2);
/// An enforcer that ran this long resets the delay.
const STABLE_RUN: std::time::Duration = std::time::Duration::from_secs(10);

/// PID 1 of the sidecar container (issue 33 finding 5: a killed sidecar took
/// its network namespace with it, and the sandbox, which shares it, was left
/// without network for good): runs the enforcer as a child and starts it again
/// when it ends, so the namespace and its interfaces stay. SIGTERM (podman
/// stop) is passed on and ends both.
fn supervise(arguments: &[String]) -> ExitCode {
    let signals = match block_signals() {
        Ok(s) => s,
        Err(e) => return fail(&format!("blocking signals: {e}")),
    };
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => return fail(&format!("cannot find my own executable: {e}")),
    };
    let mut delay = RESTART_DELAY;
    loop {
        let started = std::time::Instant::now();
        // The child inherits the blocked signals and takes them with sigwait itself.
        let child = match std::process::Command::new(&program).args(arguments).spawn() {
            Ok(child) => child,
            Err(e) => return fail(&format!("cannot start the sidecar: {e}")),
        };
        let pid = child.id() as libc::pid_t;
        let status = loop {
            match wait_signal(&signals) {
                libc::SIGCHLD => {
                    if let Some(status) = reap_children_until(pid) {
                        break status;
                    }
                }
                libc::SIGTERM | libc::SIGINT => {
                    // SAFETY: kill of our own child; it is not reaped yet, so its pid is still ours.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                    return ExitCode::SUCCESS;
                }
                _ => {}
            }
        };
        if started.elapsed() > STABLE_RUN {
            delay = RESTART_DELAY;
        }
        eprintln!("lazaret-sidecar: the sidecar ended ({}); starting it again in {} ms", describe(status), delay.as_millis());
        std::thread::sleep(delay);
        delay = (delay * 2).min(RESTART_DELAY_MAX);
    }
}

/// Reaps every ended child; the wait status of `pid` if it was one of them.
fn reap_children_until(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG and a valid status pointer.
        let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if reaped <= 0 {
            return found;
        }
        if reaped == pid {
            found = Some(status);
        }
    }
}

/// A wait status as text: `exit status N` or `killed by signal N`.
fn describe(status: libc::c_int) -> String {
    if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("exit status {}", libc::WEXITSTATUS(status))
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

fn serve(listener: UnixListener, shared: Arc<Shared>, injector: Arc<Injector>) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                let (shared, injector) = (Arc::clone(&shared), Arc::clone(&injector));
                std::thread::spawn(move || {
                    if let Err(e) = serve_client(stream, &shared, &injector) {
                        eprintln!("lazaret-sidecar: control client: {e}");
                    }
                });
            }
            Err(e) => eprintln!("lazaret-sidecar: accept: {e}"),
        }
    }
}

fn serve_client(stream: UnixStream, shared: &Shared, injector: &Injector) -> io::Result<()> {
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
            Ok(Command::Watch) => {
                // From here on this connection only carries events.
                let events = shared.events.watch();
                writer.write_all(reply_line(&SidecarReply::Watching).as_bytes())?;
                writer.write_all(b"\n")?;
                for line in events {
                    writer.write_all(line.as_bytes())?;
                    writer.write_all(b"\n")?;
                }
                return Ok(());
            }
            Ok(cmd) => handle(shared, injector, cmd).unwrap_or_else(|e| error_response(&e)),
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
            let ok = matches!(serde_json::from_str::<SidecarReply>(&answer), Ok(SidecarReply::Policy(_) | SidecarReply::Watching));
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
        let Ok(Mode::Run(options)) = parse_args(&args(&[
            "--allow",
            "10.0.0.0/8",
            "--deny=10.1.0.0/16",
            "--allow=*.npmjs.org",
            "--dns-upstream=10.0.0.53",
            "--dns-upstream",
            "[fd00::53]:5353",
            "--control",
            "/run/x.sock",
        ])) else {
            panic!("did not parse");
        };
        assert_eq!(options.control, Some(PathBuf::from("/run/x.sock")));
        assert_eq!(options.allow, vec![Entry::parse("10.0.0.0/8").unwrap(), Entry::parse("*.npmjs.org").unwrap()]);
        assert_eq!(options.deny, vec![Entry::parse("10.1.0.0/16").unwrap()]);
        let Ok(Mode::Run(services)) = parse_args(&args(&["--allow", "10.9.0.7/32 tcp/8081", "--deny=fd00::7/128 udp/53"])) else {
            panic!("did not parse");
        };
        assert_eq!(services.allow.iter().map(|e| e.to_string()).collect::<Vec<_>>(), ["10.9.0.7/32 tcp/8081"]);
        assert_eq!(services.deny.iter().map(|e| e.to_string()).collect::<Vec<_>>(), ["fd00::7/128 udp/53"]);
        assert_eq!(options.upstreams, vec!["10.0.0.53:53".parse().unwrap(), "[fd00::53]:5353".parse().unwrap()]);
        assert_eq!(parse_args(&[]), Ok(Mode::Run(RunOptions::default())));
        assert_eq!(RunOptions::default().private_answers, PrivateAnswers::Refuse, "private answers are refused by default");
        let Ok(Mode::Run(options)) = parse_args(&args(&[
            "--protect",
            "10.88.0.1",
            "--protect=fe80::1",
            "--protect-net",
            "10.88.0.1/16",
            "--protect-net=2001:db8:1::/48",
            "--private-answers=allow",
        ])) else {
            panic!("did not parse");
        };
        assert_eq!(options.protected, vec![Cidr::parse("10.88.0.1").unwrap(), Cidr::parse("fe80::1").unwrap()]);
        assert_eq!(options.protected_networks, vec![Cidr::parse("10.88.0.0/16").unwrap(), Cidr::parse("2001:db8:1::/48").unwrap()]);
        assert_eq!(options.private_answers, PrivateAnswers::Allow);
    }

    #[test]
    fn usage_names_every_request_and_the_limits() {
        use lazaret_protocol::sidecar::{MAX_FOR_MS, MAX_HOLD_MS};
        for request in ["allow", "deny", "revoke", "hold", "set", "protect", "credentials", "show", "watch"] {
            assert!(USAGE.contains(&format!("{{\"type\":\"{request}\"")), "{request}");
        }
        assert!(USAGE.contains(&format!("1 to {MAX_FOR_MS}")) && USAGE.contains(&format!("0 to {MAX_HOLD_MS}")));
    }

    #[test]
    fn default_upstreams_skip_loopback() {
        let text = "search dns.podman\nnameserver 10.213.5.1\nnameserver 127.0.0.53\n nameserver fd00::1\nnameserver bogus\n";
        assert_eq!(resolv_conf_nameservers(text), vec!["10.213.5.1:53".parse().unwrap(), "[fd00::1]:53".parse().unwrap()]);
    }

    #[test]
    fn refuses_bad_arguments() {
        for bad in [
            &["--allow"][..],
            &["--allow", "nope"],
            &["--allow", "10.9.0.0/24 tcp/80"],
            &["--dns-upstream", "resolver.test"],
            &["--protect", "10.0.0.0/40"],
            &["--protect-net", "10.0.0.0/40"],
            &["--protect-net", "host.test"],
            &["--private-answers", "yes"],
            &["--private-answers"],
            &["--control="],
            &["--bogus"],
            &["ctl"],
            &["ctl", "/s"],
            &["allow"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse_args(&args(&["--version"])), Ok(Mode::Version));
        assert_eq!(parse_args(&args(&["supervise", "--allow=10.0.0.0/8"])), Ok(Mode::Supervise(args(&["--allow=10.0.0.0/8"]))));
        assert!(parse_args(&args(&["supervise", "--allow=nope"])).is_err(), "the enforcer's options are checked up front");
        assert!(parse_args(&args(&["supervise", "ctl", "/s", "{}"])).is_err());
        assert_eq!(parse_args(&args(&["ctl", "/s", "{\"type\":\"show\"}"])).map(|m| matches!(m, Mode::Ctl { .. })), Ok(true));
    }
}
