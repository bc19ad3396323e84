//! Source locations (file, line, column) for configuration diagnostics.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A 1-based line and column in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl Location {
    /// Converts a byte span of `text` (read from `file`) into a location.
    /// Columns count characters, as editors do.
    pub fn from_span(file: &Path, text: &str, span: Range<usize>) -> Location {
        let offset = span.start.min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|index| index + 1).unwrap_or(0);
        let column = text.get(line_start..offset).map(|s| s.chars().count()).unwrap_or(0) + 1;
        Location { file: file.to_path_buf(), line, column }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based() {
        let text = "a = 1\nbé = 2\n";
        let file = Path::new("c.toml");
        assert_eq!(Location::from_span(file, text, 0..1).line, 1);
        let location = Location::from_span(file, text, 10..11);
        assert_eq!((location.line, location.column), (2, 4));
        assert_eq!(location.to_string(), "c.toml:2:4");
    }
}
