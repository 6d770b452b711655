//! The mark every figure carries, so that `--force` can tell a figure boost drew (replaceable)
//! from any other picture that happens to stand at the destination (kept): a PNG `tEXt` chunk
//! `Software` = [`MARK`] right after the header, an SVG comment as the root element's first
//! child.

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::path::Path;

/// The text of the mark.
pub const MARK: &str = "boost figure";

const PNG_SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";
/// The signature, then IHDR (length 4, type 4, 13 bytes of data, CRC 4): always first.
const AFTER_IHDR: usize = 8 + 4 + 4 + 13 + 4;
const KEYWORD: &[u8] = b"Software";

fn svg_comment() -> String {
    format!("\n<!-- {MARK} -->")
}

/// Where the SVG mark goes: right after the root element's opening tag.
fn svg_slot(text: &[u8]) -> Option<usize> {
    if !text.starts_with(b"<svg") {
        return None;
    }
    text.iter().position(|&b| b == b'>').map(|i| i + 1)
}

fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(12 + data.len());
    c.extend_from_slice(&(data.len() as u32).to_be_bytes());
    c.extend_from_slice(kind);
    c.extend_from_slice(data);
    let mut h = crc32fast::Hasher::new();
    h.update(kind);
    h.update(data);
    c.extend_from_slice(&h.finalize().to_be_bytes());
    c
}

fn text_data() -> Vec<u8> {
    [KEYWORD, b"\0", MARK.as_bytes()].concat()
}

/// Add the mark to a figure just drawn at `path` (`png` or not: SVG).
pub fn stamp(path: &Path, png: bool) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading back {}", path.display()))?;
    let out = if png {
        if bytes.len() < AFTER_IHDR || &bytes[..8] != PNG_SIGNATURE || &bytes[12..16] != b"IHDR" {
            bail!("{}: the drawn PNG has no header", path.display());
        }
        [&bytes[..AFTER_IHDR], &png_chunk(b"tEXt", &text_data()), &bytes[AFTER_IHDR..]].concat()
    } else {
        let Some(at) = svg_slot(&bytes) else { bail!("{}: the drawn SVG does not begin with <svg", path.display()) };
        [&bytes[..at], svg_comment().as_bytes(), &bytes[at..]].concat()
    };
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// Whether the file at `path` carries the mark where [`stamp`] puts it (its first bytes only).
pub fn is_marked(path: &Path) -> bool {
    let mut head = Vec::new();
    // Enough for the PNG mark, or an SVG root tag of plotters' few attributes and the mark.
    let n = (AFTER_IHDR + 12 + text_data().len()).max(4096);
    let read = std::fs::File::open(path).and_then(|f| f.take(n as u64).read_to_end(&mut head));
    if read.is_err() {
        return false;
    }
    let svg = svg_slot(&head).is_some_and(|at| head[at..].starts_with(svg_comment().as_bytes()));
    let png_mark = png_chunk(b"tEXt", &text_data());
    let png =
        head.starts_with(PNG_SIGNATURE) && head.get(AFTER_IHDR..AFTER_IHDR + png_mark.len()) == Some(&png_mark[..]);
    svg || png
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_figure_is_marked_and_a_picture_of_the_same_format_is_not() {
        let dir = tempfile::tempdir().unwrap();
        // The smallest PNG header: IHDR of a 1×1 greyscale image, then IEND.
        let ihdr = png_chunk(b"IHDR", &[0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0]);
        let png = [&PNG_SIGNATURE[..], &ihdr, &png_chunk(b"IEND", &[])].concat();
        let (p, s) = (dir.path().join("a.png"), dir.path().join("a.svg"));
        std::fs::write(&p, &png).unwrap();
        std::fs::write(&s, "<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>\n").unwrap();
        assert!(!is_marked(&p) && !is_marked(&s), "an unstamped picture counts as the user's");
        stamp(&p, true).unwrap();
        stamp(&s, false).unwrap();
        assert!(is_marked(&p) && is_marked(&s));
        // The stamp is one chunk inserted whole after IHDR: the rest of the file is unchanged.
        let stamped = std::fs::read(&p).unwrap();
        assert_eq!(stamped.len(), png.len() + 12 + text_data().len());
        assert_eq!(&stamped[stamped.len() - 12..], &png[png.len() - 12..]);
        // The mark elsewhere in a user's file (a caption, say) does not count.
        std::fs::write(&s, format!("<svg><title>a</title>{}</svg>", svg_comment())).unwrap();
        assert!(!is_marked(&s));
        assert!(!is_marked(&dir.path().join("missing.png")));
    }
}
