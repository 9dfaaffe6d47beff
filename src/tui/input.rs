//! A pane's input box: text with a cursor and readline-style editing keys. It also lays itself
//! out (character wrap) so the view can place the terminal cursor.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::wrap::char_width;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputLine {
    text: String,
    /// Byte offset into `text`, always on a char boundary.
    cursor: usize,
}

impl InputLine {
    pub fn new(text: &str) -> InputLine {
        InputLine { text: text.to_owned(), cursor: text.len() }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }

    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Replace the text (cursor at the end).
    pub fn set(&mut self, text: &str) {
        *self = InputLine::new(text);
    }

    /// Empty the box and return what it held.
    pub fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }

    pub fn insert(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    fn prev_boundary(&self, from: usize) -> usize {
        self.text[..from].char_indices().next_back().map(|(i, _)| i).unwrap_or(0)
    }

    fn next_boundary(&self, from: usize) -> usize {
        self.text[from..].chars().next().map(|c| from + c.len_utf8()).unwrap_or(from)
    }

    /// Start of the word before the cursor (skipping spaces first), as readline's ctrl+w.
    fn word_start(&self) -> usize {
        let before = &self.text[..self.cursor];
        let trimmed = before.trim_end();
        trimmed.rfind(char::is_whitespace).map(|i| i + 1).unwrap_or(0)
    }

    /// Apply an editing key; false when the key is not an editing key.
    pub fn handle_key(&mut self, key: &KeyEvent) -> bool {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        match key.code {
            KeyCode::Char(c) if !ctrl && !alt => {
                let mut buf = [0u8; 4];
                self.insert(c.encode_utf8(&mut buf));
            }
            KeyCode::Char('a') if ctrl => self.cursor = 0,
            KeyCode::Char('e') if ctrl => self.cursor = self.text.len(),
            KeyCode::Char('u') if ctrl => {
                self.text.drain(..self.cursor);
                self.cursor = 0;
            }
            KeyCode::Char('k') if ctrl => self.text.truncate(self.cursor),
            KeyCode::Char('w') if ctrl => {
                let start = self.word_start();
                self.text.drain(start..self.cursor);
                self.cursor = start;
            }
            KeyCode::Backspace if self.cursor > 0 => {
                let start = self.prev_boundary(self.cursor);
                self.text.drain(start..self.cursor);
                self.cursor = start;
            }
            KeyCode::Delete if self.cursor < self.text.len() => {
                let end = self.next_boundary(self.cursor);
                self.text.drain(self.cursor..end);
            }
            KeyCode::Left => self.cursor = self.prev_boundary(self.cursor),
            KeyCode::Right => self.cursor = self.next_boundary(self.cursor),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = self.text.len(),
            KeyCode::Backspace | KeyCode::Delete => {}
            _ => return false,
        }
        true
    }

    /// The text broken into rows of at most `width` cells (newlines start rows), and the cursor's
    /// (row, column).
    pub fn layout(&self, width: usize) -> (Vec<String>, (usize, usize)) {
        let width = width.max(1);
        let mut rows = vec![String::new()];
        let mut col = 0;
        let mut cursor = (0, 0);
        for (i, c) in self.text.char_indices() {
            if i == self.cursor {
                cursor = (rows.len() - 1, col);
            }
            if c == '\n' {
                rows.push(String::new());
                col = 0;
                continue;
            }
            let c = if c.is_control() { '\u{fffd}' } else { c };
            let w = char_width(c);
            if col + w > width {
                rows.push(String::new());
                col = 0;
                if i == self.cursor {
                    cursor = (rows.len() - 1, 0);
                }
            }
            rows.last_mut().expect("one row at least").push(c);
            col += w;
        }
        if self.cursor == self.text.len() {
            if col >= width {
                rows.push(String::new());
                col = 0;
            }
            cursor = (rows.len() - 1, col);
        }
        (rows, cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn edits_like_readline() {
        let mut input = InputLine::new("hello big world");
        assert!(input.handle_key(&key(KeyCode::Char('w'), KeyModifiers::CONTROL)));
        assert_eq!(input.text(), "hello big ");
        input.handle_key(&key(KeyCode::Home, KeyModifiers::NONE));
        input.handle_key(&key(KeyCode::Char('>'), KeyModifiers::NONE));
        assert_eq!(input.text(), ">hello big ");
        input.handle_key(&key(KeyCode::Char('k'), KeyModifiers::CONTROL));
        assert_eq!(input.text(), ">");
        assert!(!input.handle_key(&key(KeyCode::F(5), KeyModifiers::NONE)));
    }

    #[test]
    fn layout_places_the_cursor() {
        let input = InputLine::new("abcdef\ngh");
        let (rows, cursor) = input.layout(4);
        assert_eq!(rows, ["abcd", "ef", "gh"]);
        assert_eq!(cursor, (2, 2));
    }
}
