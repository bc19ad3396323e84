//! `lazaret-testhost`: the hosts the end-to-end network tests and benchmarks create
//! for themselves on internal podman networks, and a probe they run inside the sandbox.
//! Static (musl), so it runs in any container image; never part of a release.
//!
//! - `dns [ADDRESS:]PORT RECORD...`: an authoritative DNS server on ADDRESS:PORT
//!   (UDP; 0.0.0.0 when only a port is given). It
//!   prints `question NAME TYPE` for every question it gets, so a test can show that a
//!   refused question never arrived. A RECORD is `NAME=ADDRESS` (an A or AAAA record,
//!   TTL 300; a name given twice answers both), `NAME=OTHER` (a CNAME: the answer
//!   holds the alias and OTHER's addresses, as a recursive resolver's would) or
//!   `NAME=ADDRESS,ADDRESS...` (a rebinding name, TTL 1: its n-th question of a type
//!   gets the n-th address of that type, the last one from then on). Names it does
//!   not know get NXDOMAIN; other types an empty answer.
//! - `echo PORT`: a TCP echo server (every byte of a connection comes back).
//! - `echo-probe HOST PORT SECONDS`: from inside a sandbox, connects to HOST:PORT
//!   (a name is resolved as the sandbox resolves it), prints `connected`, then sends a
//!   byte every 200 ms and waits up to 1 s for it to come back; the first time it does
//!   not, prints `cut after_ms=N error=...` and ends; after SECONDS prints `held`.
//! - `dns-burst PREFIX COUNT`: from inside a sandbox, sends COUNT A questions for the
//!   distinct names `PREFIX<n>.test` to the sandbox's resolver (127.0.0.1:53) as fast as
//!   it can, then collects replies for 15 s; prints `sent N replies M`.
//! - `dns-time NAME COUNT`: from inside a sandbox, asks the sandbox's resolver
//!   (127.0.0.1:53) COUNT `A` questions for NAME one after another; prints
//!   `query_us_p50=... query_us_p99=... answered=N`.
//! - `sink PORT`: a TCP server for the benchmark: reads each connection to its end, then
//!   answers one byte.
//! - `bench ADDRESS PORT CONNECTIONS BYTES`: from inside a sandbox, times CONNECTIONS
//!   TCP connects (handshake only) and one BYTES-long upload (until the sink's byte
//!   comes back); prints `connect_us_p50=... connect_us_p99=... mbit_per_s=...`.
//! - `mark-connect ADDRESS PORT MARK`: sets SO_MARK=MARK on a TCP socket, then
//!   connects; prints `mark=ok|<error> connect=ok|<error>`.
//! - `udp-listen PORT`: prints `got FROM` for every datagram on port PORT (IPv4 and IPv6,
//!   broadcast and all-hosts multicast included).
//! - `uds-flood PATH COUNT`: COUNT times connects to the Unix socket PATH, writes 16
//!   junk bytes and closes; prints `flooded COUNT` (connections refused count too).
//! - `uds-hold PATH COUNT SECONDS`: opens up to COUNT connections to PATH at once and
//!   holds them SECONDS; prints `held N`.
//! - `udp-send ADDRESS PORT [INTERFACE [pktinfo]]`: sends one datagram with SO_BROADCAST
//!   set; for an IPv4 multicast ADDRESS with INTERFACE, chooses it with IP_MULTICAST_IF
//!   (skipping the routing rules' usual path), for IPv6 uses it as the scope; with
//!   `pktinfo`, names INTERFACE in an IP_PKTINFO / IPV6_PKTINFO control message of
//!   `sendmsg` instead (an output interface set per packet); prints `send=ok|<error>`.
//! - `setxattr PATH NAME VALUE`: sets the extended attribute NAME of PATH (not
//!   following a final symlink); prints `setxattr NAME=ok|<error>`.
//! - `mknod-whiteout PATH`: makes PATH a character device 0:0 (what overlayfs
//!   stores as a whiteout); prints `mknod=ok|<error>`.
//! - `https-api PORT CERT KEY HEADER EXPECTED` and `http-probe PORT PATH ...`:
//!   an HTTPS API origin that checks its key, and the client of the sidecar's
//!   credential endpoint (see `http.rs`).
//! - `http-bench ADDRESS:PORT HOST [--tls CA] ...`: the credential endpoint's
//!   benchmark client: request latency on a kept connection and how late each
//!   chunk of a streamed answer arrives (see `http.rs`).
//! - `test-certs DIR NAME...`: a throwaway CA and, for each NAME, a certificate
//!   for that DNS name signed by it, as PEM files: `DIR/ca.pem`, `DIR/NAME.pem`,
//!   `DIR/NAME.key` (the editor suites' origins; see `http.rs`).

mod http;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use lazaret_dns::wire::{
    encode_error, encode_query, encode_reply, parse_query, type_name, Question, CLASS_IN, TYPE_A, TYPE_AAAA, TYPE_CNAME,
};
use lazaret_dns::Rcode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("dns") => dns(&args[1..]),
        Some("sink") => sink(&args[1..]),
        Some("echo") => echo(&args[1..]),
        Some("dns-burst") => dns_burst(&args[1..]),
        Some("dns-time") => dns_time(&args[1..]),
        Some("echo-probe") => echo_probe(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("mark-connect") => mark_connect(&args[1..]),
        Some("udp-listen") => udp_listen(&args[1..]),
        Some("udp-send") => udp_send(&args[1..]),
        Some("uds-flood") => uds_flood(&args[1..]),
        Some("uds-hold") => uds_hold(&args[1..]),
        Some("setxattr") => set_xattr(&args[1..]),
        Some("mknod-whiteout") => mknod_whiteout(&args[1..]),
        Some("privileges") => privileges(),
        Some("https-api") => http::https_api(&args[1..]),
        Some("http-probe") => http::http_probe(&args[1..]),
        Some("test-certs") => http::test_certs(&args[1..]),
        Some("http-bench") => http::http_bench(&args[1..]),
        _ => Err("usage: lazaret-testhost dns|sink|bench|mark-connect ... (see the source)".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("lazaret-testhost: {message}");
            ExitCode::FAILURE
        }
    }
}

fn arg<T: std::str::FromStr>(args: &[String], index: usize, what: &str) -> Result<T, String> {
    args.get(index).and_then(|text| text.parse().ok()).ok_or(format!("missing or bad {what}"))
}

/// What one name of the test DNS server stands for.
enum Record {
    Address(IpAddr),
    Alias(String),
    Rebinding(Vec<IpAddr>),
}

fn parse_record(text: &str) -> Result<(String, Record), String> {
    let (name, value) = text.split_once('=').ok_or(format!("{text:?} is not NAME=ADDRESS, NAME=OTHER or NAME=ADDRESS,ADDRESS..."))?;
    let record = if value.contains(',') {
        let addresses = value.split(',').map(|a| a.parse().map_err(|_| format!("bad address in {text:?}"))).collect::<Result<_, _>>()?;
        Record::Rebinding(addresses)
    } else if let Ok(address) = value.parse() {
        Record::Address(address)
    } else {
        Record::Alias(value.to_ascii_lowercase())
    };
    Ok((name.to_ascii_lowercase(), record))
}

fn dns(args: &[String]) -> Result<(), String> {
    let listen = args.first().ok_or("missing [ADDRESS:]PORT")?;
    let listen: SocketAddr = match listen.parse::<u16>() {
        Ok(port) => SocketAddr::from(([0, 0, 0, 0], port)),
        Err(_) => listen.parse().map_err(|_| format!("{listen:?} is neither PORT nor ADDRESS:PORT"))?,
    };
    let records: Vec<(String, Record)> = args[1..].iter().map(|record| parse_record(record)).collect::<Result<_, _>>()?;
    let socket = UdpSocket::bind(listen).map_err(|e| format!("bind {listen}: {e}"))?;
    println!("listening");
    let mut asked: std::collections::HashMap<(String, u16), usize> = std::collections::HashMap::new();
    let mut buffer = [0u8; 4096];
    loop {
        let Ok((length, peer)) = socket.recv_from(&mut buffer) else { continue };
        let packet = &buffer[..length];
        let reply = match parse_query(packet) {
            Ok(query) => {
                let name = query.question.name();
                let record_type = query.question.record_type;
                println!("question {name} {}", type_name(record_type));
                let _ = std::io::stdout().flush();
                let times = asked.entry((name.clone(), record_type)).or_default();
                let answers = answers_for(&records, &name, record_type, *times);
                *times += 1;
                match answers {
                    None => Some(encode_reply(&query, Rcode::NameError, &[])),
                    Some(_) if !matches!(record_type, TYPE_A | TYPE_AAAA) => Some(encode_reply(&query, Rcode::NoError, &[])),
                    Some(answers) => Some(reply_with(&query, &answers)),
                }
            }
            Err(_) => encode_error(packet, Rcode::FormatError),
        };
        if let Some(reply) = reply {
            let _ = socket.send_to(&reply, peer);
        }
    }
}

/// One answer record: its owner, and an address (A/AAAA) or an alias (CNAME), with a TTL.
type Answer = (String, Result<IpAddr, String>, u32);

/// The answer records for the `times`-th question of `record_type` about `name`
/// (`None`: the name is unknown). A CNAME is followed one hop.
fn answers_for(records: &[(String, Record)], name: &str, record_type: u16, times: usize) -> Option<Vec<Answer>> {
    let own: Vec<&Record> = records.iter().filter(|(n, _)| n == name).map(|(_, r)| r).collect();
    if own.is_empty() {
        return None;
    }
    let wanted = |address: &IpAddr| (record_type == TYPE_A) == address.is_ipv4();
    let mut answers = Vec::new();
    for record in own {
        match record {
            Record::Address(address) => answers.push((name.to_owned(), Ok(*address), 300)),
            Record::Rebinding(addresses) => {
                let of_type: Vec<&IpAddr> = addresses.iter().filter(|a| wanted(a)).collect();
                if let Some(address) = of_type.get(times.min(of_type.len().saturating_sub(1))) {
                    answers.push((name.to_owned(), Ok(**address), 1));
                }
            }
            Record::Alias(target) => {
                answers.push((name.to_owned(), Err(target.clone()), 300));
                answers.extend(answers_for(records, target, record_type, times).unwrap_or_default().into_iter().filter(|a| a.1.is_ok()));
            }
        }
    }
    answers.retain(|(_, data, _)| data.as_ref().map_or(true, wanted));
    Some(answers)
}

/// A NOERROR reply to `query` holding `answers` (names written out, no compression).
fn reply_with(query: &lazaret_dns::wire::Query, answers: &[Answer]) -> Vec<u8> {
    let mut out = encode_reply(query, Rcode::NoError, &[]);
    let write_name = |out: &mut Vec<u8>, name: &str| {
        for label in name.split('.').filter(|label| !label.is_empty()) {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
    };
    for (owner, data, ttl) in answers {
        write_name(&mut out, owner);
        let (record_type, data) = match data {
            Ok(IpAddr::V4(v4)) => (TYPE_A, v4.octets().to_vec()),
            Ok(IpAddr::V6(v6)) => (TYPE_AAAA, v6.octets().to_vec()),
            Err(alias) => {
                let mut name = Vec::new();
                write_name(&mut name, alias);
                (TYPE_CNAME, name)
            }
        };
        out.extend_from_slice(&record_type.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
    out
}

/// A UDP socket connected to the sandbox's resolver (the sidecar's, 127.0.0.1:53).
fn resolver_socket() -> Result<UdpSocket, String> {
    let socket = UdpSocket::bind(("127.0.0.1", 0)).map_err(|e| format!("bind: {e}"))?;
    socket.connect(("127.0.0.1", 53)).map_err(|e| format!("connect: {e}"))?;
    Ok(socket)
}

fn dns_burst(args: &[String]) -> Result<(), String> {
    let prefix: String = arg(args, 0, "PREFIX")?;
    let count: u16 = arg(args, 1, "COUNT")?;
    let socket = resolver_socket()?;
    let mut sent = 0;
    for n in 0..count {
        let query = encode_query(n, &Question::new(&format!("{prefix}{n}.test"), TYPE_A));
        if socket.send(&query).is_ok() {
            sent += 1;
        }
    }
    // Polled without blocking: the older runsc does not honour a UDP
    // socket's receive time-out (SO_RCVTIMEO), and a blocking recv would
    // wait for ever once the last reply is in.
    socket.set_nonblocking(true).map_err(|e| format!("nonblocking: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut replies = 0;
    let mut buffer = [0u8; 512];
    while Instant::now() < deadline {
        match socket.recv(&mut buffer) {
            Ok(_) => replies += 1,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break,
        }
    }
    println!("sent {sent} replies {replies}");
    Ok(())
}

fn dns_time(args: &[String]) -> Result<(), String> {
    let name: String = arg(args, 0, "NAME")?;
    let count: u16 = arg(args, 1, "COUNT")?;
    let socket = resolver_socket()?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| format!("timeout: {e}"))?;
    let mut times = Vec::with_capacity(usize::from(count));
    let mut buffer = [0u8; 512];
    for id in 0..count {
        let started = Instant::now();
        socket.send(&encode_query(id, &Question::new(&name, TYPE_A))).map_err(|e| format!("send: {e}"))?;
        // The reply to this question (same id); others are late replies.
        while let Ok(length) = socket.recv(&mut buffer) {
            if length >= 2 && u16::from_be_bytes([buffer[0], buffer[1]]) == id {
                times.push(started.elapsed().as_micros() as u64);
                break;
            }
        }
    }
    times.sort_unstable();
    let percentile = |p: usize| times.get((times.len() * p / 100).min(times.len().saturating_sub(1))).copied().unwrap_or(0);
    println!("query_us_p50={} query_us_p99={} answered={}", percentile(50), percentile(99), times.len());
    Ok(())
}

fn echo(args: &[String]) -> Result<(), String> {
    serve_tcp(args, |mut stream| {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
    })
}

/// A TCP server on the port `args` name: prints `listening`, then serves
/// each connection on its own thread with `serve`.
fn serve_tcp(args: &[String], serve: fn(TcpStream)) -> Result<(), String> {
    let port: u16 = arg(args, 0, "PORT")?;
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("bind: {e}"))?;
    println!("listening");
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || serve(stream));
    }
    Ok(())
}

fn echo_probe(args: &[String]) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    let host: String = arg(args, 0, "HOST")?;
    let port: u16 = arg(args, 1, "PORT")?;
    let seconds: u64 = arg(args, 2, "SECONDS")?;
    let target = (host.as_str(), port).to_socket_addrs().map_err(|e| format!("resolve {host}: {e}"))?.next().ok_or("no address")?;
    let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(5)).map_err(|e| format!("connect: {e}"))?;
    // Polled without blocking: the older runsc does not honour a socket's
    // receive time-out (SO_RCVTIMEO), and a blocking read would wait for ever
    // once the connection is cut.
    stream.set_nonblocking(true).map_err(|e| format!("nonblocking: {e}"))?;
    println!("connected");
    let started = Instant::now();
    let mut byte = [0u8; 1];
    while started.elapsed() < Duration::from_secs(seconds) {
        let round = stream.write_all(b"p").and_then(|()| {
            let sent = Instant::now();
            loop {
                match stream.read(&mut byte) {
                    Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed")),
                    Ok(_) => return Ok(()),
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock && sent.elapsed() < Duration::from_secs(1) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no echo within 1 s"))
                    }
                    Err(error) => return Err(error),
                }
            }
        });
        if let Err(error) = round {
            println!("cut after_ms={} error={}", started.elapsed().as_millis(), error.to_string().replace(' ', "_"));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("held");
    Ok(())
}

fn sink(args: &[String]) -> Result<(), String> {
    serve_tcp(args, |mut stream| {
        let mut buffer = vec![0u8; 256 * 1024];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 {
                break;
            }
        }
        let _ = stream.write_all(b"k");
    })
}

fn bench(args: &[String]) -> Result<(), String> {
    let address: IpAddr = arg(args, 0, "ADDRESS")?;
    let port: u16 = arg(args, 1, "PORT")?;
    let connections: usize = arg(args, 2, "CONNECTIONS")?;
    let bytes: usize = arg(args, 3, "BYTES")?;
    let target = SocketAddr::new(address, port);
    let mut connect_times = Vec::with_capacity(connections);
    for _ in 0..connections {
        let started = Instant::now();
        let stream = TcpStream::connect_timeout(&target, Duration::from_secs(5)).map_err(|e| format!("connect: {e}"))?;
        connect_times.push(started.elapsed().as_micros() as u64);
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    connect_times.sort_unstable();
    let percentile = |p: usize| connect_times.get((connect_times.len() * p / 100).min(connect_times.len().saturating_sub(1))).copied();
    let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(5)).map_err(|e| format!("connect: {e}"))?;
    let chunk = vec![0x5au8; 256 * 1024];
    let started = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        let n = chunk.len().min(bytes - sent);
        stream.write_all(&chunk[..n]).map_err(|e| format!("send: {e}"))?;
        sent += n;
    }
    stream.shutdown(std::net::Shutdown::Write).map_err(|e| format!("shutdown: {e}"))?;
    let mut ack = [0u8; 1];
    stream.read_exact(&mut ack).map_err(|e| format!("ack: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "connect_us_p50={} connect_us_p99={} mbit_per_s={:.1}",
        percentile(50).unwrap_or(0),
        percentile(99).unwrap_or(0),
        bytes as f64 * 8.0 / seconds / 1e6
    );
    Ok(())
}

fn mark_connect(args: &[String]) -> Result<(), String> {
    let address: IpAddr = arg(args, 0, "ADDRESS")?;
    let port: u16 = arg(args, 1, "PORT")?;
    let text: String = arg(args, 2, "MARK")?;
    let mark = u32::from_str_radix(text.trim_start_matches("0x"), 16).map_err(|_| format!("bad MARK {text:?} (hex)"))?;
    let domain = if address.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket() takes no pointers; the returned descriptor is owned below.
    let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh socket that nothing else owns; TcpStream closes it on drop.
    let stream = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: setsockopt reads size_of::<u32>() bytes from a live local.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mark as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    let marked = if rc == 0 { "ok".to_owned() } else { format!("{}", std::io::Error::last_os_error()).replace(' ', "_") };
    let connected = connect(&stream, SocketAddr::new(address, port));
    println!("mark={marked} connect={connected}");
    Ok(())
}

fn udp_listen(args: &[String]) -> Result<(), String> {
    let port: u16 = arg(args, 0, "PORT")?;
    let socket = UdpSocket::bind(("::", port)).map_err(|e| format!("bind: {e}"))?;
    println!("listening");
    let _ = std::io::stdout().flush();
    let mut buffer = [0u8; 2048];
    loop {
        if let Ok((_, from)) = socket.recv_from(&mut buffer) {
            println!("got {from}");
            let _ = std::io::stdout().flush();
        }
    }
}

fn uds_flood(args: &[String]) -> Result<(), String> {
    let path: String = arg(args, 0, "PATH")?;
    let count: usize = arg(args, 1, "COUNT")?;
    for _ in 0..count {
        if let Ok(mut stream) = std::os::unix::net::UnixStream::connect(&path) {
            let _ = stream.write_all(b"\x16\x03\x01junk-junk-junk");
        }
    }
    println!("flooded {count}");
    Ok(())
}

fn uds_hold(args: &[String]) -> Result<(), String> {
    let path: String = arg(args, 0, "PATH")?;
    let count: usize = arg(args, 1, "COUNT")?;
    let seconds: u64 = arg(args, 2, "SECONDS")?;
    let held: Vec<std::os::unix::net::UnixStream> =
        (0..count).filter_map(|_| std::os::unix::net::UnixStream::connect(&path).ok()).collect();
    println!("held {}", held.len());
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(seconds));
    drop(held);
    Ok(())
}

fn c_string(value: &str, what: &str) -> Result<std::ffi::CString, String> {
    std::ffi::CString::new(value).map_err(|_| format!("{what} holds a NUL byte"))
}

fn set_xattr(args: &[String]) -> Result<(), String> {
    let path: String = arg(args, 0, "PATH")?;
    let name: String = arg(args, 1, "NAME")?;
    let value: String = arg(args, 2, "VALUE")?;
    let (c_path, c_name) = (c_string(&path, "PATH")?, c_string(&name, "NAME")?);
    // SAFETY: lsetxattr reads two NUL-terminated strings and `value.len()`
    // bytes of `value`, all alive for the call.
    let result = unsafe { libc::lsetxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    let outcome = if result == 0 { "ok".to_owned() } else { std::io::Error::last_os_error().to_string() };
    println!("setxattr {name}={outcome}");
    Ok(())
}

fn mknod_whiteout(args: &[String]) -> Result<(), String> {
    let path: String = arg(args, 0, "PATH")?;
    let c_path = c_string(&path, "PATH")?;
    // SAFETY: mknod reads a NUL-terminated string alive for the call.
    let result = unsafe { libc::mknod(c_path.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(0, 0)) };
    let outcome = if result == 0 { "ok".to_owned() } else { std::io::Error::last_os_error().to_string() };
    println!("mknod={outcome}");
    Ok(())
}

/// Prints this process's no_new_privs flag and process limit as the kernel
/// answers them (`prctl`, `getrlimit`): the gVisor in Debian 12 shows no
/// `NoNewPrivs` line in `/proc/PID/status` and no `/proc/PID/limits`.
fn privileges() -> Result<(), String> {
    // SAFETY: PR_GET_NO_NEW_PRIVS reads no memory; the other arguments must be 0.
    let flag = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    if flag < 0 {
        return Err(format!("prctl(PR_GET_NO_NEW_PRIVS): {}", std::io::Error::last_os_error()));
    }
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one `rlimit`, which `limit` is, alive for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) } != 0 {
        return Err(format!("getrlimit(RLIMIT_NPROC): {}", std::io::Error::last_os_error()));
    }
    println!("no-new-privs {flag}");
    println!("nproc {} {}", limit.rlim_cur, limit.rlim_max);
    Ok(())
}

fn udp_send(args: &[String]) -> Result<(), String> {
    let address: IpAddr = arg(args, 0, "ADDRESS")?;
    let port: u16 = arg(args, 1, "PORT")?;
    let interface = args.get(2).map(|name| std::ffi::CString::new(name.as_str()).map_err(|_| "bad INTERFACE".to_owned())).transpose()?;
    // SAFETY: if_nametoindex reads a NUL-terminated string that outlives the call.
    let index = interface.as_ref().map(|name| unsafe { libc::if_nametoindex(name.as_ptr()) }).unwrap_or(0);
    let socket = UdpSocket::bind(if address.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).map_err(|e| format!("bind: {e}"))?;
    let _ = socket.set_broadcast(true);
    let mut target = SocketAddr::new(address, port);
    match (&mut target, index) {
        (SocketAddr::V6(v6), index) if index != 0 => v6.set_scope_id(index),
        (SocketAddr::V4(_), index) if index != 0 => {
            let request = libc::ip_mreqn {
                imr_multiaddr: libc::in_addr { s_addr: 0 },
                imr_address: libc::in_addr { s_addr: 0 },
                imr_ifindex: index as libc::c_int,
            };
            // SAFETY: setsockopt reads size_of::<ip_mreqn>() bytes from a live local.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_MULTICAST_IF,
                    (&request as *const libc::ip_mreqn).cast(),
                    std::mem::size_of::<libc::ip_mreqn>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                println!("multicast_if={}", std::io::Error::last_os_error().to_string().replace(' ', "_"));
            }
        }
        _ => {}
    }
    let sent = if args.get(3).map(String::as_str) == Some("pktinfo") {
        send_with_pktinfo(&socket, target, index)
    } else {
        match socket.send_to(b"lazaret-probe", target) {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.to_string().replace(' ', "_"),
        }
    };
    println!("send={sent}");
    Ok(())
}

/// `sendmsg` with the output interface in a PKTINFO control message.
fn send_with_pktinfo(socket: &UdpSocket, target: SocketAddr, index: u32) -> String {
    let payload = b"lazaret-probe";
    let (mut address, address_length) = socket_address(target);
    let mut iov = libc::iovec { iov_base: payload.as_ptr() as *mut libc::c_void, iov_len: payload.len() };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data for which all-zero bytes are valid.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_name = (&mut address as *mut libc::sockaddr_storage).cast();
    message.msg_namelen = address_length;
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    let (level, kind, data_length) = match target {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_PKTINFO, std::mem::size_of::<libc::in_pktinfo>()),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, std::mem::size_of::<libc::in6_pktinfo>()),
    };
    // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes.
    message.msg_controllen = unsafe { libc::CMSG_SPACE(data_length as u32) } as _;
    // SAFETY: the control buffer (128 bytes, u64-aligned) holds one header of
    // CMSG_SPACE(data_length) bytes; CMSG_FIRSTHDR points into it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = level;
        (*header).cmsg_type = kind;
        (*header).cmsg_len = libc::CMSG_LEN(data_length as u32) as _;
        let data = libc::CMSG_DATA(header);
        match target {
            SocketAddr::V4(_) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: index as libc::c_int,
                    ipi_spec_dst: libc::in_addr { s_addr: 0 },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(data.cast::<libc::in_pktinfo>(), info);
            }
            SocketAddr::V6(_) => {
                let info = libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: [0; 16] }, ipi6_ifindex: index };
                std::ptr::write_unaligned(data.cast::<libc::in6_pktinfo>(), info);
            }
        }
    }
    // SAFETY: every pointer in `message` refers to a live local for the whole call.
    let rc = unsafe { libc::sendmsg(socket.as_raw_fd(), &message, 0) };
    if rc >= 0 {
        "ok".to_owned()
    } else {
        std::io::Error::last_os_error().to_string().replace(' ', "_")
    }
}

fn connect(stream: &TcpStream, target: SocketAddr) -> String {
    let (storage, length) = socket_address(target);
    // SAFETY: storage is a properly initialised sockaddr of `length` bytes that outlives the call.
    let rc = unsafe { libc::connect(stream.as_raw_fd(), (&storage as *const libc::sockaddr_storage).cast(), length) };
    if rc == 0 {
        "ok".to_owned()
    } else {
        format!("{}", std::io::Error::last_os_error()).replace(' ', "_")
    }
}

fn socket_address(target: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all-zero bytes are valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match target {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            (storage, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            (storage, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}
