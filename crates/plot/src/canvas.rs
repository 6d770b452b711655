//! Where a figure goes: PNG or SVG chosen by the extension, the embedded font registered once,
//! and the file written beside its destination and renamed into place, so an existing file is
//! never half-replaced. Without `force` an existing file is kept; with it, only a figure boost
//! drew (it carries [`crate::mark`]) is replaced.

use crate::mark;
use anyhow::{Context, Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::PathBuf;
use std::sync::Once;

/// The one font family figures use: DejaVu Sans, embedded, so text needs no system fonts.
pub const FONT: &str = "sans-serif";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The TTF ships inside the `dejavu` crate; failing to parse it is a build defect.
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font did not parse"));
    });
}

/// A figure's destination file.
#[derive(Debug, Clone)]
pub struct Output {
    pub path: PathBuf,
    /// Replace an existing file (atomically) instead of refusing.
    pub force: bool,
}

enum Format {
    Png,
    Svg,
}

impl Output {
    pub fn new(path: impl Into<PathBuf>, force: bool) -> Self {
        Self { path: path.into(), force }
    }

    fn format(&self) -> Result<Format> {
        match self.path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("png") => Ok(Format::Png),
            Some("svg") => Ok(Format::Svg),
            _ => bail!("{}: a figure is written as .png or .svg; name the file with one of them", self.path.display()),
        }
    }

    /// Draw `figure` and put it at the destination.
    pub fn write(&self, figure: &impl Figure) -> Result<()> {
        let format = self.format()?;
        if self.path.is_dir() {
            bail!("{} is a directory; name a .png or .svg file", self.path.display());
        }
        // A link is the user's, and so is its target (a dangling one counts as standing there):
        // kept even with --force.
        if self.path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            bail!("{} is a link; it is kept, even with --force: name the figure's own file", self.path.display());
        }
        let exists = self.path.exists();
        if exists && !self.force {
            bail!("{} already exists; choose another file or pass --force to replace it", self.path.display());
        }
        // --force replaces a figure boost drew, never another picture under the same name.
        if exists && !mark::is_marked(&self.path) {
            bail!(
                "{} was not drawn by boost (it lacks the \"{}\" mark every figure carries); it is kept, \
                 even with --force: choose another file",
                self.path.display(),
                mark::MARK
            );
        }
        register_font();
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            bail!("{}: the directory {} does not exist", self.path.display(), dir.display());
        }
        let suffix = match format {
            Format::Png => ".png",
            Format::Svg => ".svg",
        };
        let tmp = tempfile::Builder::new()
            .prefix(".boost-figure-")
            .suffix(suffix)
            .tempfile_in(&dir)
            .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
        let size = figure.size();
        let drawn = match format {
            Format::Png => render(BitMapBackend::new(tmp.path(), size).into_drawing_area(), figure),
            Format::Svg => render(SVGBackend::new(tmp.path(), size).into_drawing_area(), figure),
        };
        drawn.with_context(|| format!("drawing {}", self.path.display()))?;
        mark::stamp(tmp.path(), matches!(format, Format::Png))?;
        // A temporary file is private (0600); the figure is an ordinary file for its readers.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))
                .with_context(|| format!("cannot write {}", self.path.display()))?;
        }
        tmp.persist(&self.path).map_err(|e| anyhow!("cannot write {}: {}", self.path.display(), e.error))?;
        Ok(())
    }
}

/// Something drawn onto a whole canvas, whatever its backend.
pub trait Figure {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>;
}

fn render<DB: DrawingBackend>(area: DrawingArea<DB, Shift>, figure: &impl Figure) -> Result<()> {
    area.fill(&WHITE).map_err(plot_err)?;
    figure.draw(&area)?;
    area.present().map_err(plot_err)?;
    Ok(())
}

/// A plotters error as an `anyhow` error.
pub fn plot_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow!("{e}")
}

/// The largest magnitude an axis is drawn to. plotters' tick search never ends on a range
/// near f64's limit (a loss of 1.7e308 beside 0 hung `boost plot`); no metric of a training
/// run comes near this bound, so values past it are reported instead of drawn.
pub const AXIS_LIMIT: f64 = 1e100;

/// Whether an axis from `lo` to `hi` can be drawn (both finite and within [`AXIS_LIMIT`]).
pub fn drawable(lo: f64, hi: f64) -> bool {
    lo.is_finite() && hi.is_finite() && lo.abs() <= AXIS_LIMIT && hi.abs() <= AXIS_LIMIT
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    struct Blank;
    impl Figure for Blank {
        fn size(&self) -> (u32, u32) {
            (8, 8)
        }
        fn draw<DB: DrawingBackend>(&self, _: &DrawingArea<DB, Shift>) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_link_where_the_figure_goes_is_kept_with_its_target_even_with_force() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("theirs.png");
        std::fs::write(&target, "the user's picture").unwrap();
        let link = dir.path().join("figure.png");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let dangling = dir.path().join("dangling.svg");
        std::os::unix::fs::symlink(dir.path().join("gone.svg"), &dangling).unwrap();
        for path in [&link, &dangling] {
            let e = Output::new(path, true).write(&Blank).unwrap_err().to_string();
            assert!(e.contains("is a link") && e.contains("even with --force"), "{e}");
        }
        assert_eq!(std::fs::read_link(&link).unwrap(), target);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "the user's picture");
        assert_eq!(std::fs::read_link(&dangling).unwrap(), dir.path().join("gone.svg"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3, "no temporary file left");
    }

    #[test]
    fn force_replaces_a_figure_boost_drew_and_keeps_any_other_picture() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["figure.png", "figure.svg"] {
            let path = dir.path().join(name);
            Output::new(&path, false).write(&Blank).unwrap();
            assert!(mark::is_marked(&path), "{name}: a drawn figure carries the mark");
            let e = Output::new(&path, false).write(&Blank).unwrap_err().to_string();
            assert!(e.contains("already exists"), "{e}");
            // Ours: replaced with --force (a fresh file, so its inode changes).
            std::fs::write(&path, [std::fs::read(&path).unwrap(), b"old".to_vec()].concat()).unwrap();
            Output::new(&path, true).write(&Blank).unwrap();
            assert!(!std::fs::read(&path).unwrap().ends_with(b"old"), "{name}: replaced");
            // The user's: a picture of the same format without the mark is kept, byte for byte.
            let theirs = format!("the user's {name}");
            std::fs::write(&path, &theirs).unwrap();
            let e = Output::new(&path, true).write(&Blank).unwrap_err().to_string();
            assert!(e.contains("not drawn by boost") && e.contains("even with --force"), "{e}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), theirs);
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary file left");
    }
}
