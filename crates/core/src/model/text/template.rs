//! Rendering a model's chat template, bounded. A template comes with the model, from anyone, and
//! minijinja bounds neither the size of the values it builds (a string doubled in a loop, a
//! filter given a width of 10^12) nor the work inside one filter (a join over a billion items),
//! so a template renders away from the engine: in a forked child with its own memory and CPU
//! time ([`TEMPLATE_MEMORY`], [`TEMPLATE_CPU`]; `sandbox`), and a template that exceeds them
//! fails its own request, never the process. Inside, fuel bounds its steps and its output is
//! capped as it is written, so the common runaways (loops, huge text) get their own errors.
//!
//! The child is forked from a small helper process, not from this one: a fork copies the page
//! tables of everything the process holds (about 25 ms per GB of loaded model, each render). The
//! helper is this same executable started again (`/proc/self/exe`, with [`HELPER_ENV`] set), whose
//! initializer serves renders before `main` would run; it is started at the first render, lives as
//! long as this process (it ends when its socket closes), and is started again if it dies. Where
//! it cannot start (an executable without this initializer answers something else), renders fork
//! from this process; where no process can be forked, they run here, bounded by fuel and the
//! output cap only.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::sandbox::{self, Outcome};
use super::tokenizer::ChatMessage;

/// Template steps allowed for a conversation: a base, and more per message.
const TEMPLATE_FUEL: u64 = 2_000_000;
const TEMPLATE_FUEL_PER_MESSAGE: u64 = 10_000;
/// Most text a chat template may render (far beyond any context window).
pub const TEMPLATE_MAX_BYTES: usize = 32 << 20;
/// Memory a render may add to what its process holds: the conversation is already there, so this
/// holds the output (at most [`TEMPLATE_MAX_BYTES`]) and the template's own values many times over.
pub const TEMPLATE_MEMORY: u64 = 256 << 20;
/// CPU time a render may take (whole seconds); running out of fuel takes well under a tenth.
pub const TEMPLATE_CPU: Duration = Duration::from_secs(2);
/// How long a render is waited for, on a machine busy enough to give it little CPU.
const TEMPLATE_WALL: Duration = Duration::from_secs(30);

const LIMITS: sandbox::Limits =
    sandbox::Limits { memory: TEMPLATE_MEMORY, cpu: TEMPLATE_CPU, wall: TEMPLATE_WALL, max_answer: TEMPLATE_MAX_BYTES };

/// One render: the template and what it is given.
#[derive(Serialize)]
pub struct Job<'a> {
    pub template: &'a str,
    pub messages: &'a [ChatMessage],
    pub add_generation_prompt: bool,
    pub bos_token: &'a str,
    pub eos_token: &'a str,
}

/// A [`Job`] as the helper reads it.
#[derive(Deserialize)]
struct OwnedJob {
    template: String,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    bos_token: String,
    eos_token: String,
}

impl OwnedJob {
    fn job(&self) -> Job<'_> {
        Job {
            template: &self.template,
            messages: &self.messages,
            add_generation_prompt: self.add_generation_prompt,
            bos_token: &self.bos_token,
            eos_token: &self.eos_token,
        }
    }
}

/// Render `job` within the limits (see the module comment).
pub fn render(job: &Job) -> Result<String> {
    let outcome = match helper_render(job) {
        Some(outcome) => outcome,
        None => match sandbox::run(LIMITS, || render_here(job).map_err(|e| format!("{e:#}"))) {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!("chat template rendered in-process, without its memory limit: {e}");
                return render_here(job);
            }
        },
    };
    match outcome {
        Outcome::Done(answer) => answer.map_err(anyhow::Error::msg),
        Outcome::OutOfMemory => {
            bail!("the chat template needs more than {} MB of memory: refused", TEMPLATE_MEMORY >> 20)
        }
        Outcome::OutOfTime => bail!("the chat template runs for more than {} s: refused", TEMPLATE_CPU.as_secs()),
        Outcome::Died(why) => bail!("the chat template's render failed ({why}): refused"),
    }
}

/// Render `job` in this process, bounded by fuel and the output cap only.
fn render_here(job: &Job) -> Result<String> {
    let mut env = minijinja::Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    env.set_fuel(Some(fuel_for(job.messages.len())));
    env.add_template("chat", job.template).context("chat template does not parse")?;
    let tmpl = env.get_template("chat")?;
    let mut out = BoundedText::default();
    let rendered = tmpl.render_captured_to(
        minijinja::context! {
            messages => job.messages,
            add_generation_prompt => job.add_generation_prompt,
            bos_token => job.bos_token,
            eos_token => job.eos_token,
        },
        &mut out,
    );
    match rendered {
        Ok(_) => String::from_utf8(out.bytes).context("the chat template rendered text that is not UTF-8"),
        Err(_) if out.overflowed => {
            bail!("the chat template rendered more than {} MB: refused", TEMPLATE_MAX_BYTES >> 20)
        }
        Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel => {
            bail!("the chat template does too much work (over {} steps): refused", fuel_for(job.messages.len()))
        }
        Err(e) => Err(e).context("chat template failed to render"),
    }
}

fn fuel_for(messages: usize) -> u64 {
    TEMPLATE_FUEL + TEMPLATE_FUEL_PER_MESSAGE.saturating_mul(messages as u64)
}

/// The rendered prompt, refusing to grow past [`TEMPLATE_MAX_BYTES`].
#[derive(Default)]
struct BoundedText {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl Write for BoundedText {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > TEMPLATE_MAX_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("the chat template's output is too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ------------------------------------------------------------------ the helper process

/// Set (to [`HELPER_MAGIC`]) in the helper's environment: its initializer serves renders.
pub const HELPER_ENV: &str = "COHORT_TEMPLATE_HELPER";
/// What a helper says first, and the value of [`HELPER_ENV`].
const HELPER_MAGIC: &[u8] = b"cohort-template-helper-1";
/// The helper's one argument: harmless to an executable without the initializer (cohort refuses
/// it as an unknown subcommand, a test binary runs no test by that name).
pub const HELPER_ARG: &str = "__cohort_template_helper__";
/// How long a starting helper may take to say it is there.
const HELPER_START: Duration = Duration::from_secs(10);

enum Helper {
    NotStarted,
    Running {
        child: std::process::Child,
        socket: UnixStream,
    },
    /// Could not start here: renders fork from this process.
    Unavailable,
}

static HELPER: Mutex<Helper> = Mutex::new(Helper::NotStarted);

/// Render `job` through the helper; None where there is no helper to ask, or it failed to
/// answer (it is then stopped, and started again at the next render).
fn helper_render(job: &Job) -> Option<Outcome> {
    let mut helper = HELPER.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(*helper, Helper::NotStarted) {
        *helper = match start_helper() {
            Ok((child, socket)) => Helper::Running { child, socket },
            Err(e) => {
                tracing::info!("no chat template helper ({e:#}): templates render in a fork of this process");
                Helper::Unavailable
            }
        };
    }
    let Helper::Running { child, socket } = &mut *helper else { return None };
    match ask(socket, job) {
        Ok(outcome) => Some(outcome),
        Err(e) => {
            tracing::warn!("the chat template helper did not answer ({e}); it is started again at the next render");
            let _ = child.kill();
            let _ = child.wait();
            *helper = Helper::NotStarted;
            None
        }
    }
}

fn start_helper() -> Result<(std::process::Child, UnixStream)> {
    use std::os::unix::process::CommandExt;
    let (ours, theirs) = UnixStream::pair()?;
    no_sigpipe(&ours);
    let exe = if cfg!(target_os = "linux") { "/proc/self/exe".into() } else { std::env::current_exe()? };
    let mut child = std::process::Command::new(exe)
        .arg(HELPER_ARG)
        .env(HELPER_ENV, std::str::from_utf8(HELPER_MAGIC).unwrap_or_default())
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs.try_clone()?)))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stderr(std::process::Stdio::null())
        // Its own process group: a ctrl-c meant for this process does not end it.
        .process_group(0)
        .spawn()
        .context("cannot start it")?;
    ours.set_read_timeout(Some(HELPER_START))?;
    let mut hello = vec![0u8; HELPER_MAGIC.len()];
    if let Err(e) = (&ours)
        .read_exact(&mut hello)
        .map_err(anyhow::Error::from)
        .and_then(|()| if hello == HELPER_MAGIC { Ok(()) } else { bail!("this executable does not serve renders") })
    {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    Ok((child, ours))
}

/// One render through the helper's socket.
fn ask(socket: &mut UnixStream, job: &Job) -> std::io::Result<Outcome> {
    let request = serde_json::to_vec(job)?;
    socket.set_write_timeout(Some(TEMPLATE_WALL))?;
    send_all(socket, &sandbox::frame(b'r', &request))?;
    // The helper waits for its child at most TEMPLATE_WALL, then answers.
    socket.set_read_timeout(Some(TEMPLATE_WALL + Duration::from_secs(10)))?;
    let frame = read_frame(socket, TEMPLATE_MAX_BYTES)?;
    Ok(Outcome::from_frame(&frame))
}

/// Read one frame whose payload is at most `max` bytes.
fn read_frame(r: &mut impl Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut frame = vec![0u8; sandbox::HEADER];
    r.read_exact(&mut frame)?;
    let len = sandbox::frame_len(&frame).filter(|&n| n - sandbox::HEADER <= max).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "a frame larger than any answer or request")
    })?;
    frame.resize(len, 0);
    r.read_exact(&mut frame[sandbox::HEADER..])?;
    Ok(frame)
}

/// Write all of `buf` to the helper; a helper that has gone away is an error, not SIGPIPE (some
/// commands leave SIGPIPE's default action, which would end this process).
fn send_all(socket: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    #[cfg(target_os = "linux")]
    const FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
    #[cfg(not(target_os = "linux"))]
    const FLAGS: libc::c_int = 0;
    while !buf.is_empty() {
        // SAFETY: buf is valid for buf.len() bytes; the socket is ours.
        let n = unsafe { libc::send(socket.as_raw_fd(), buf.as_ptr().cast(), buf.len(), FLAGS) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Where sockets take SO_NOSIGPIPE (macOS), set it (Linux's sends pass MSG_NOSIGNAL instead).
fn no_sigpipe(_socket: &UnixStream) {
    #[cfg(target_os = "macos")]
    {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: sets an option on our own socket from a valid c_int.
        unsafe {
            libc::setsockopt(
                _socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NOSIGPIPE,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
#[used]
#[cfg_attr(target_os = "linux", unsafe(link_section = ".init_array"))]
#[cfg_attr(target_os = "macos", unsafe(link_section = "__DATA,__mod_init_func"))]
static SERVE_IF_HELPER: extern "C" fn() = serve_if_helper;

/// Run by the loader before `main`: in a helper (see [`HELPER_ENV`]), serve renders on fds 0
/// and 1 until the socket closes, then leave; `main` never runs there. Anywhere else, nothing.
#[cfg(any(target_os = "linux", target_os = "macos"))]
extern "C" fn serve_if_helper() {
    if std::env::var_os(HELPER_ENV).is_none_or(|v| v.as_encoded_bytes() != HELPER_MAGIC) {
        return;
    }
    use std::os::fd::FromRawFd;
    // SAFETY: fds 0 and 1 are the socket the parent gave; ManuallyDrop never closes them.
    let mut input = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let mut output = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    if output.write_all(HELPER_MAGIC).is_ok() {
        while let Ok(request) = read_frame(&mut *input, usize::MAX / 2) {
            let outcome = match serde_json::from_slice::<OwnedJob>(&request[sandbox::HEADER..]) {
                Ok(job) => match sandbox::run(LIMITS, || render_here(&job.job()).map_err(|e| format!("{e:#}"))) {
                    Ok(outcome) => outcome,
                    Err(e) => Outcome::Died(format!("the helper cannot fork: {e}")),
                },
                Err(e) => Outcome::Died(format!("the helper cannot read the request: {e}")),
            };
            if output.write_all(&outcome.to_frame()).is_err() {
                break;
            }
        }
    }
    // SAFETY: leaves the helper without running anything of the program it was started as.
    unsafe { libc::_exit(0) }
}
