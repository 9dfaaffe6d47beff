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

    /// The text broken into rows of at most `width` cells, between words where it can (a word
    /// longer than a row is split; spaces stay at the end of the row they follow), newlines
    /// starting rows; and the cursor's (row, column).
    pub fn layout(&self, width: usize) -> (Vec<String>, (usize, usize)) {
        let width = width.max(1);
        let shown = |c: char| if c.is_control() { '\u{fffd}' } else { c };
        let cells = |s: &str| s.chars().map(|c| char_width(shown(c))).sum::<usize>();
        let mut rows = Vec::new();
        let mut cursor = (0, 0);
        let mut base = 0;
        for line in self.text.split('\n') {
            // Byte offsets (in `line`) where rows start.
            let mut starts = vec![0];
            let mut col = 0;
            let mut word_start = None;
            let mut after_space = false;
            for (i, c) in line.char_indices() {
                let w = char_width(shown(c));
                if c == ' ' {
                    col += w;
                    after_space = true;
                    continue;
                }
                if after_space {
                    word_start = Some(i);
                    after_space = false;
                }
                let row_start = *starts.last().expect("one row at least");
                if col + w > width && i > row_start {
                    let at = word_start.filter(|s| *s > row_start).unwrap_or(i);
                    starts.push(at);
                    col = cells(&line[at..i]);
                    word_start = None;
                }
                col += w;
            }
            let first_row = rows.len();
            for (k, &start) in starts.iter().enumerate() {
                let end = starts.get(k + 1).copied().unwrap_or(line.len());
                rows.push(line[start..end].chars().map(shown).collect::<String>());
            }
            if (base..=base + line.len()).contains(&self.cursor) {
                let at = self.cursor - base;
                let k = starts.iter().rposition(|s| *s <= at).expect("starts has 0");
                let col = cells(&line[starts[k]..at]);
                cursor = if col < width {
                    (first_row + k, col)
                } else if k + 1 == starts.len() {
                    // The row is full: the cursor waits at the start of a row of its own.
                    rows.insert(first_row + k + 1, String::new());
                    (first_row + k + 1, 0)
                } else {
                    (first_row + k, width - 1)
                };
            }
            base += line.len() + 1;
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
    fn layout_wraps_between_words() {
        let input = InputLine::new("hello wonderful world");
        let (rows, cursor) = input.layout(12);
        assert_eq!(rows, ["hello ", "wonderful ", "world"]);
        assert_eq!(cursor, (2, 5));
        // The cursor inside a moved word follows it.
        let mut input = InputLine::new("hello wonderful world");
        input.cursor = "hello wond".len();
        assert_eq!(input.layout(12).1, (1, 4));
        // A word longer than a row is split; a row's last cell filled puts the cursor on the next.
        let (rows, cursor) = InputLine::new("ab abcdefghijkl").layout(5);
        assert_eq!((rows, cursor), (vec!["ab ".to_owned(), "abcde".into(), "fghij".into(), "kl".into()], (3, 2)));
        let (rows, cursor) = InputLine::new("abc de").layout(6);
        assert_eq!((rows, cursor), (vec!["abc de".to_owned(), String::new()], (1, 0)));
    }

    #[test]
    fn layout_places_the_cursor() {
        let input = InputLine::new("abcdef\ngh");
        let (rows, cursor) = input.layout(4);
        assert_eq!(rows, ["abcd", "ef", "gh"]);
        assert_eq!(cursor, (2, 2));
    }
}
