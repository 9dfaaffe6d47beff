//! Taking the terminal over and giving it back: raw mode, the alternate screen, bracketed paste
//! and mouse capture (a click focuses a pane, the wheel scrolls it; most terminals still select
//! text with shift held while dragging). A panic hook gives the terminal back before the panic
//! message is printed, so a crash never leaves the shell in raw mode or reporting mouse events;
//! quitting, SIGTERM and SIGHUP go through the same `leave`, and so does `suspend`, which gives
//! the terminal to the external editor until `resume` takes it back.

use std::io::{Stdout, Write, stdout};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;

use anyhow::Result;
use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode, supports_keyboard_enhancement,
};
use crossterm::{cursor, execute};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

pub type Tui = Terminal<CrosstermBackend<Stdout>>;

/// The thread that owns the screen; panics elsewhere (the engine's threads) do not tear it down.
static UI_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// Whether the terminal took the kitty keyboard protocol's first level (so it reports
/// shift+enter apart from enter), to be popped on the way out.
static ENHANCED_KEYS: AtomicBool = AtomicBool::new(false);

pub fn enter() -> Result<Tui> {
    install_panic_hook();
    take_over()?;
    Ok(Terminal::new(CrosstermBackend::new(stdout()))?)
}

/// Raw mode, the alternate screen, bracketed paste, mouse capture, and the kitty keyboard
/// protocol's first level where the terminal has it.
fn take_over() -> Result<()> {
    enable_raw_mode()?;
    let mut out = stdout();
    if let Err(e) = execute!(out, EnterAlternateScreen, EnableBracketedPaste, EnableMouseCapture) {
        leave();
        return Err(e.into());
    }
    // Only the disambiguation level: keys are reported as before, with modifiers on enter.
    if supports_keyboard_enhancement().unwrap_or(false)
        && execute!(out, PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)).is_ok()
    {
        ENHANCED_KEYS.store(true, Ordering::SeqCst);
    }
    Ok(())
}

/// Give the terminal to another program (the external editor) through the same `leave` as
/// quitting; `resume` takes it back.
pub fn suspend() {
    leave();
}

/// Take the terminal back after `suspend`, and draw the whole screen anew on the next frame.
pub fn resume(tui: &mut Tui) -> Result<()> {
    take_over()?;
    tui.clear()?;
    Ok(())
}

/// Give the terminal back (safe to call more than once).
pub fn leave() {
    let mut out = stdout();
    if ENHANCED_KEYS.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, PopKeyboardEnhancementFlags);
    }
    let _ = disable_raw_mode();
    let _ = execute!(out, DisableMouseCapture, DisableBracketedPaste, LeaveAlternateScreen, cursor::Show);
    let _ = out.flush();
}

fn install_panic_hook() {
    if UI_THREAD.set(std::thread::current().id()).is_err() {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        if Some(&thread.id()) == UI_THREAD.get() {
            leave();
            tracing::error!("the UI panicked: {info}");
            previous(info);
        } else {
            // Printing here would scribble over the screen; the log has it, and the engine's
            // channels closing turns into error states in the panes.
            tracing::error!("thread {} panicked: {info}", thread.name().unwrap_or("unnamed"));
        }
    }));
}
