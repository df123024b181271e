//! A network for partition tests: every node in a network namespace of its
//! own, joined through a router namespace that the test can cut, one
//! direction at a time, and slow down.
//!
//! ```text
//!   root (the test: clients)          node i (om)
//!   omr<tag> 198.18.L.1 ──┐     ┌── eth0 198.18.L+i.1 (default via .254)
//!                         router
//!         root 198.18.L.2 ┘     └── n<i> 198.18.L+i.254
//! ```
//!
//! Every packet between two nodes is forwarded by the router, so a one-way
//! cut is one policy rule there (`from A to B blackhole`): forwarded packets
//! always take a route lookup, unlike a socket's cached input route. Client
//! traffic comes from the root namespace's address and is never cut. Delay
//! sends a pair's packets through a TUN device in the router that a thread of
//! the test reads, holds and writes back (the kernel here has no netem).
//!
//! Addresses lie in 198.18.0.0/15 (reserved for such test networks) and
//! exist only in namespaces the lab creates; dropping the lab deletes them.
//! Needs root and `ip`; [`Lab::create`] says why not otherwise, so a test can
//! skip with that message.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Labs created by this process, for distinct subnets (16 at most at once).
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Policy-rule preferences in the router: cuts, then delays, then the rest.
const CUT_PREF: u32 = 100;
const DELAY_PREF: u32 = 200;
const DELAY_TABLE: u32 = 200;

/// A network of `n` node namespaces and a router between them.
pub struct Lab {
    /// Namespace names start with this (`omt<pid>x<k>`).
    prefix: String,
    /// The third octet of the root link; node i uses `base + i`.
    base: u8,
    n: usize,
    root_link: String,
    tun: std::sync::OnceLock<Tun>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("{e}");
    }
}

fn sysctl(ns: &str, key: &str, value: &str) -> Result<(), String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c"])
        .arg(format!("echo {value} > {path}"))
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "sysctl {key}={value} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes the namespaces and links that labs of processes no longer
/// running left behind (a test killed before its lab was dropped).
fn remove_orphans() {
    let Ok(dir) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix("omt") else {
            continue;
        };
        let Some(pid) = rest.split('x').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

impl Lab {
    /// Creates the namespaces, links and routes for `n` nodes (at most 14).
    pub fn create(n: usize) -> Result<Lab, String> {
        assert!((1..=14).contains(&n));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        remove_orphans();
        // A slot whose subnet no other lab (another test process) routes.
        let k = (0..16)
            .map(|_| NEXT.fetch_add(1, Ordering::Relaxed) % 16)
            .find(|k| {
                Command::new("ip")
                    .args(["route", "show", &format!("198.18.{}.0/20", k * 16)])
                    .output()
                    .is_ok_and(|o| o.status.success() && o.stdout.is_empty())
            })
            .ok_or("every partition-lab subnet is in use")?;
        let pid = std::process::id();
        let lab = Lab {
            prefix: format!("omt{pid}x{k}"),
            base: (k * 16) as u8,
            n,
            root_link: format!("omr{}x{k}", pid % 100_000),
            tun: std::sync::OnceLock::new(),
        };
        // Whether namespaces can be made at all decides skipping; anything
        // failing after that is a failure (a partial lab is removed by its
        // drop).
        ip(&["netns", "add", &lab.router()])?;
        if let Err(e) = lab.build() {
            panic!("building the partition lab: {e}");
        }
        Ok(lab)
    }

    fn build(&self) -> Result<(), String> {
        let r = self.router();
        ip(&["-n", &r, "link", "set", "lo", "up"])?;
        sysctl(&r, "net.ipv4.ip_forward", "1")?;
        for key in ["all", "default"] {
            sysctl(&r, &format!("net.ipv4.conf.{key}.rp_filter"), "0")?;
        }
        // The root's link into the router.
        let b = self.base;
        ip(&[
            "link",
            "add",
            &self.root_link,
            "type",
            "veth",
            "peer",
            "name",
            "root",
            "netns",
            &r,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("198.18.{b}.1/24"),
            "dev",
            &self.root_link,
        ])?;
        ip(&["link", "set", "dev", &self.root_link, "up"])?;
        ip(&[
            "-n",
            &r,
            "addr",
            "add",
            &format!("198.18.{b}.2/24"),
            "dev",
            "root",
        ])?;
        ip(&["-n", &r, "link", "set", "dev", "root", "up"])?;
        ip(&[
            "route",
            "add",
            &format!("198.18.{b}.0/20"),
            "via",
            &format!("198.18.{b}.2"),
        ])?;
        for i in 1..=self.n {
            let ns = self.ns(i);
            let net = b as usize + i;
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            let side = format!("n{i}");
            ip(&[
                "-n", &r, "link", "add", &side, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&[
                "-n",
                &r,
                "addr",
                "add",
                &format!("198.18.{net}.254/24"),
                "dev",
                &side,
            ])?;
            ip(&["-n", &r, "link", "set", "dev", &side, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("198.18.{net}.1/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "dev", "eth0", "up"])?;
            ip(&[
                "-n",
                &ns,
                "route",
                "add",
                "default",
                "via",
                &format!("198.18.{net}.254"),
            ])?;
        }
        Ok(())
    }

    fn router(&self) -> String {
        format!("{}r", self.prefix)
    }

    /// The namespace of node `i` (1-based).
    pub fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    /// Node `i`'s address (1-based).
    pub fn addr(&self, i: usize) -> String {
        format!("198.18.{}.1", self.base as usize + i)
    }

    /// The command prefix that runs a program in node `i`'s namespace.
    pub fn exec_in(&self, i: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.ns(i)]
    }

    fn pair_pref(&self, base: u32, from: usize, to: usize) -> String {
        (base + (from * 16 + to) as u32).to_string()
    }

    /// Packets from node `from` to node `to` are dropped (one direction).
    pub fn cut(&self, from: usize, to: usize) {
        if from == to {
            return;
        }
        self.pair_rule(CUT_PREF * 10, from, to, &["blackhole"]);
    }

    /// Replaces the router's rule for packets from `from` to `to` at the
    /// preference `base` gives the pair with one that does `action`.
    fn pair_rule(&self, base: u32, from: usize, to: usize, action: &[&str]) {
        let (r, pref) = (self.router(), self.pair_pref(base, from, to));
        let _ = ip(&["-n", &r, "rule", "del", "pref", &pref]);
        let (src, dst) = (self.addr(from), self.addr(to));
        let mut args = vec![
            "-n", &r, "rule", "add", "pref", &pref, "from", &src, "to", &dst,
        ];
        args.extend_from_slice(action);
        must(&args);
    }

    /// Both directions between `a` and `b`.
    pub fn cut_both(&self, a: usize, b: usize) {
        self.cut(a, b);
        self.cut(b, a);
    }

    /// Node `i` can neither send to nor receive from any other node (clients
    /// still reach it).
    pub fn isolate(&self, i: usize) {
        for j in 1..=self.n {
            self.cut_both(i, j);
        }
    }

    /// Every cut and every delay removed.
    pub fn heal(&self) {
        for from in 1..=self.n {
            for to in 1..=self.n {
                for base in [CUT_PREF * 10, DELAY_PREF * 10] {
                    let pref = self.pair_pref(base, from, to);
                    let _ = ip(&["-n", &self.router(), "rule", "del", "pref", &pref]);
                }
            }
        }
    }

    /// Packets from `from` to `to` arrive `delay` late (through the router's
    /// TUN relay; one delay for every delayed pair, the latest set).
    pub fn delay(&self, from: usize, to: usize, delay: Duration) {
        if from == to {
            return;
        }
        let tun = self
            .tun
            .get_or_init(|| Tun::start(&self.router()).unwrap_or_else(|e| panic!("{e}")));
        tun.delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
        let (iif, table) = (format!("n{from}"), DELAY_TABLE.to_string());
        self.pair_rule(DELAY_PREF * 10, from, to, &["iif", &iif, "lookup", &table]);
    }

    /// Runs `f` on a thread inside node `i`'s namespace (sockets it opens
    /// live there).
    pub fn in_ns<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let ns = self.ns(i);
        std::thread::scope(|s| {
            s.spawn(move || {
                enter(&ns).unwrap_or_else(|e| panic!("{e}"));
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// Packets the TUN relay delayed so far.
    pub fn delayed_packets(&self) -> u64 {
        self.tun
            .get()
            .map_or(0, |t| t.relayed.load(Ordering::Relaxed))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(t) = self.tun.take() {
            t.stop.store(true, Ordering::Relaxed);
            for h in t.threads {
                let _ = h.join();
            }
        }
        for i in 1..=self.n {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["link", "del", &self.root_link]);
        let _ = ip(&["netns", "del", &self.router()]);
    }
}

/// A TUN device in the router: what the delay rules route into it is read,
/// held for the delay and written back, and the router forwards it on.
struct Tun {
    delay_us: Arc<AtomicU64>,
    relayed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

const TUN_NAME: &str = "delay";

/// Packets read from the TUN device, each with when to write it back.
type DelayQueue = VecDeque<(Instant, Vec<u8>)>;

impl Tun {
    fn start(router: &str) -> Result<Tun, String> {
        // The device is made from a thread that entered the router's
        // namespace, so it is created there.
        let r = router.to_string();
        let fd = std::thread::spawn(move || open_tun_in(&r))
            .join()
            .map_err(|_| "tun thread panicked".to_string())??;
        ip(&["-n", router, "link", "set", "dev", TUN_NAME, "up"])?;
        sysctl(router, &format!("net.ipv4.conf.{TUN_NAME}.rp_filter"), "0")?;
        ip(&[
            "-n",
            router,
            "route",
            "add",
            "default",
            "dev",
            TUN_NAME,
            "table",
            &DELAY_TABLE.to_string(),
        ])?;
        let fd = Arc::new(fd);
        let delay_us = Arc::new(AtomicU64::new(0));
        let relayed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let queue: Arc<Mutex<DelayQueue>> = Arc::default();
        let reader = {
            let (fd, delay_us, stop, queue) =
                (fd.clone(), delay_us.clone(), stop.clone(), queue.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while !stop.load(Ordering::Relaxed) {
                    let mut p = libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    if unsafe { libc::poll(&mut p, 1, 50) } <= 0 {
                        continue;
                    }
                    if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                        break;
                    }
                    // SAFETY: reads into a buffer of the given length.
                    let n =
                        unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                    if n <= 0 {
                        continue;
                    }
                    let due =
                        Instant::now() + Duration::from_micros(delay_us.load(Ordering::Relaxed));
                    queue
                        .lock()
                        .unwrap()
                        .push_back((due, buf[..n as usize].to_vec()));
                }
            })
        };
        let writer = {
            let (fd, relayed, stop) = (fd.clone(), relayed.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let next = queue.lock().unwrap().front().map(|(due, _)| *due);
                    match next {
                        Some(due) if due <= Instant::now() => {
                            let (_, pkt) = queue.lock().unwrap().pop_front().unwrap();
                            // SAFETY: writes a buffer of the given length.
                            unsafe { libc::write(fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
                            relayed.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(due) => std::thread::sleep(
                            due.saturating_duration_since(Instant::now())
                                .min(Duration::from_millis(5)),
                        ),
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            })
        };
        Ok(Tun {
            delay_us,
            relayed,
            stop,
            threads: vec![reader, writer],
        })
    }
}

/// Moves the calling thread into network namespace `ns`.
fn enter(ns: &str) -> Result<(), String> {
    let path = std::ffi::CString::new(format!("/var/run/netns/{ns}")).unwrap();
    // SAFETY: opening a path; the fd is closed below.
    let nsfd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if nsfd < 0 {
        return Err(format!("open {ns}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: setns on a namespace fd affects only this thread.
    let r = unsafe { libc::setns(nsfd, libc::CLONE_NEWNET) };
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(nsfd) };
    if r != 0 {
        return Err(format!("setns {ns}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Opens a TUN device named [`TUN_NAME`] in namespace `ns` (this thread
/// enters it and is not used for anything else).
fn open_tun_in(ns: &str) -> Result<OwnedFd, String> {
    enter(ns)?;
    let dev = std::ffi::CString::new("/dev/net/tun").unwrap();
    // SAFETY: opening a path.
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "open /dev/net/tun: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is a fresh descriptor owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct ifreq: a 16-byte name, then the flags (short) in a 24-byte union.
    let mut ifr = [0u8; 40];
    ifr[..TUN_NAME.len()].copy_from_slice(TUN_NAME.as_bytes());
    let flags: libc::c_short = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which ifr is laid out as.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, ifr.as_mut_ptr()) };
    if r < 0 {
        return Err(format!("TUNSETIFF: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}
