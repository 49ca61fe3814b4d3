//! `sluicescale`: a video scaler element on libswscale (FFmpeg's scaler, Debian's
//! `libswscale-dev`), for the live ladder's rungs (`pipelines/live-rung.txt`).
//!
//! Why not `videoscale`: at the same CPU (GStreamer 1.22's `bilinear2` with the colorimetry
//! pinned and libswscale's bicubic each took about 0.5 s of CPU for 20 s of a 720p30 source
//! scaled to 480p, measured on 2026-12-07), libswscale's bicubic gives the 480p rung 0.002 more
//! SSIM (0.9923 → 0.9943), which pays for a cheaper encoder there. The `avvideoscale` element
//! that gst-libav once had is gone, so this is the same scaler wrapped as a `GstVideoFilter`.
//!
//! Planar 8-bit YUV only (`I420`, `YV12`, `Y42B`, `Y444`, `NV12`): what H.264 decoders give and
//! x264 takes; anything else goes through `videoconvert` before it. It scales only: format,
//! colorimetry, chroma siting and frame rate pass through unchanged, so no colour is converted.
//! Scaling is bicubic (libswscale's and ffmpeg's default); equal sizes pass through.

use std::ffi::c_int;
use std::sync::Mutex;

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;
use gstreamer_video as gst_video;
use gstreamer_video::prelude::*;

/// The few calls of libswscale 6 (FFmpeg 5.1) this element makes.
mod ffi {
    use std::ffi::{c_double, c_int, c_void};

    /// `struct SwsContext`, opaque.
    #[repr(C)]
    pub struct SwsContext {
        _private: [u8; 0],
    }

    /// `SWS_BICUBIC`.
    pub const BICUBIC: c_int = 4;

    /// `enum AVPixelFormat` values (libavutil 57).
    pub const YUV420P: c_int = 0;
    pub const YUV422P: c_int = 4;
    pub const YUV444P: c_int = 5;
    pub const NV12: c_int = 23;

    #[link(name = "swscale")]
    extern "C" {
        pub fn sws_getContext(
            src_w: c_int,
            src_h: c_int,
            src_format: c_int,
            dst_w: c_int,
            dst_h: c_int,
            dst_format: c_int,
            flags: c_int,
            src_filter: *mut c_void,
            dst_filter: *mut c_void,
            param: *const c_double,
        ) -> *mut SwsContext;
        pub fn sws_scale(
            c: *mut SwsContext,
            src: *const *const u8,
            src_stride: *const c_int,
            src_slice_y: c_int,
            src_slice_h: c_int,
            dst: *const *mut u8,
            dst_stride: *const c_int,
        ) -> c_int;
        pub fn sws_freeContext(c: *mut SwsContext);
    }
}

/// One libswscale context, freed when dropped.
struct Context(*mut ffi::SwsContext);

// SAFETY: a context is used by one thread at a time (it lives behind the element's mutex) and
// libswscale keeps no thread-local state in it.
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the pointer came from sws_getContext and is freed once, here.
        unsafe { ffi::sws_freeContext(self.0) }
    }
}

/// libswscale's pixel format for a GStreamer one this element takes, and whether the U and V
/// planes come in the other order (`YV12`).
fn pixel_format(format: gst_video::VideoFormat) -> Option<(c_int, bool)> {
    use gst_video::VideoFormat as F;
    match format {
        F::I420 => Some((ffi::YUV420P, false)),
        F::Yv12 => Some((ffi::YUV420P, true)),
        F::Y42b => Some((ffi::YUV422P, false)),
        F::Y444 => Some((ffi::YUV444P, false)),
        F::Nv12 => Some((ffi::NV12, false)),
        _ => None,
    }
}

const FORMATS: [gst_video::VideoFormat; 5] = [
    gst_video::VideoFormat::I420,
    gst_video::VideoFormat::Yv12,
    gst_video::VideoFormat::Y42b,
    gst_video::VideoFormat::Y444,
    gst_video::VideoFormat::Nv12,
];

/// A frame's planes as libswscale takes them (at most three; unused ones null).
fn planes<T>(
    n: usize,
    swap: bool,
    mut at: impl FnMut(usize) -> Option<(*mut T, i32)>,
) -> Option<([*mut T; 4], [c_int; 4])> {
    let mut data = [std::ptr::null_mut(); 4];
    let mut stride = [0; 4];
    for i in 0..n.min(3) {
        let (p, s) = at(i)?;
        let j = if swap && i > 0 { 3 - i } else { i };
        data[j] = p;
        stride[j] = s;
    }
    Some((data, stride))
}

mod imp {
    use super::*;
    use gstreamer_base::subclass::prelude::*;
    use gstreamer_video::subclass::prelude::*;

    #[derive(Default)]
    pub struct SwScale {
        /// The context for the negotiated sizes and format, with whether `YV12`'s planes swap.
        context: Mutex<Option<(Context, bool)>>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for SwScale {
        const NAME: &'static str = "SluiceSwScale";
        type Type = super::SwScale;
        type ParentType = gst_video::VideoFilter;
    }

    impl ObjectImpl for SwScale {}
    impl GstObjectImpl for SwScale {}

    impl ElementImpl for SwScale {
        fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
            static META: std::sync::OnceLock<gst::subclass::ElementMetadata> = std::sync::OnceLock::new();
            Some(META.get_or_init(|| {
                gst::subclass::ElementMetadata::new(
                    "Sluice libswscale scaler",
                    "Filter/Converter/Video/Scaler",
                    "Scales planar 8-bit YUV video with libswscale (bicubic)",
                    "Sluice",
                )
            }))
        }

        fn pad_templates() -> &'static [gst::PadTemplate] {
            static TEMPLATES: std::sync::OnceLock<Vec<gst::PadTemplate>> = std::sync::OnceLock::new();
            TEMPLATES.get_or_init(|| {
                let caps = gst_video::VideoCapsBuilder::new().format_list(FORMATS).build();
                [gst::PadDirection::Src, gst::PadDirection::Sink]
                    .into_iter()
                    .filter_map(|d| {
                        let name = if d == gst::PadDirection::Src { "src" } else { "sink" };
                        gst::PadTemplate::new(name, d, gst::PadPresence::Always, &caps).ok()
                    })
                    .collect()
            })
        }
    }

    impl BaseTransformImpl for SwScale {
        const MODE: gstreamer_base::subclass::BaseTransformMode =
            gstreamer_base::subclass::BaseTransformMode::NeverInPlace;
        const PASSTHROUGH_ON_SAME_CAPS: bool = true;
        const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

        /// Any size on the other side; everything else as it is.
        fn transform_caps(
            &self,
            _direction: gst::PadDirection,
            caps: &gst::Caps,
            filter: Option<&gst::Caps>,
        ) -> Option<gst::Caps> {
            let mut other = caps.clone();
            for s in other.make_mut().iter_mut() {
                s.set("width", gst::IntRange::new(1, i32::MAX));
                s.set("height", gst::IntRange::new(1, i32::MAX));
                if s.has_field("pixel-aspect-ratio") {
                    s.set(
                        "pixel-aspect-ratio",
                        gst::FractionRange::new(
                            gst::Fraction::new(1, i32::MAX),
                            gst::Fraction::new(i32::MAX, 1),
                        ),
                    );
                }
            }
            Some(match filter {
                Some(f) => f.intersect_with_mode(&other, gst::CapsIntersectMode::First),
                None => other,
            })
        }

        /// Left free by the other side, the size stays the one given.
        fn fixate_caps(
            &self,
            _direction: gst::PadDirection,
            caps: &gst::Caps,
            othercaps: gst::Caps,
        ) -> gst::Caps {
            let mut other = othercaps;
            other.truncate();
            if let (Some(given), Some(s)) = (caps.structure(0), other.make_mut().structure_mut(0)) {
                for field in ["width", "height"] {
                    if let Ok(v) = given.get::<i32>(field) {
                        s.fixate_field_nearest_int(field, v);
                    }
                }
                if s.has_field("pixel-aspect-ratio") {
                    s.fixate_field_nearest_fraction("pixel-aspect-ratio", gst::Fraction::new(1, 1));
                }
            }
            other.fixate();
            other
        }
    }

    impl VideoFilterImpl for SwScale {
        fn set_info(
            &self,
            _incaps: &gst::Caps,
            in_info: &gst_video::VideoInfo,
            _outcaps: &gst::Caps,
            out_info: &gst_video::VideoInfo,
        ) -> Result<(), gst::LoggableError> {
            let mut held = self.context.lock().unwrap_or_else(|p| p.into_inner());
            *held = None;
            if in_info.width() == out_info.width() && in_info.height() == out_info.height() {
                return Ok(()); // passthrough
            }
            let (Some((format, swap)), true) =
                (pixel_format(in_info.format()), in_info.format() == out_info.format())
            else {
                return Err(gst::loggable_error!(gst::CAT_RUST, "sluicescale: unsupported formats"));
            };
            let size = |v: u32| c_int::try_from(v).map_err(|_| gst::loggable_error!(gst::CAT_RUST, "size"));
            let (iw, ih, ow, oh) = (
                size(in_info.width())?,
                size(in_info.height())?,
                size(out_info.width())?,
                size(out_info.height())?,
            );
            // SAFETY: plain values; a null return is handled.
            let c = unsafe {
                ffi::sws_getContext(
                    iw,
                    ih,
                    format,
                    ow,
                    oh,
                    format,
                    ffi::BICUBIC,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null(),
                )
            };
            if c.is_null() {
                return Err(gst::loggable_error!(
                    gst::CAT_RUST,
                    "sluicescale: libswscale refused {iw}x{ih} → {ow}x{oh}"
                ));
            }
            *held = Some((Context(c), swap));
            Ok(())
        }

        fn transform_frame(
            &self,
            inframe: &gst_video::VideoFrameRef<&gst::BufferRef>,
            outframe: &mut gst_video::VideoFrameRef<&mut gst::BufferRef>,
        ) -> Result<gst::FlowSuccess, gst::FlowError> {
            let held = self.context.lock().unwrap_or_else(|p| p.into_inner());
            let Some((context, swap)) = held.as_ref() else { return Err(gst::FlowError::NotNegotiated) };
            let n = inframe.n_planes() as usize;
            let in_strides = inframe.plane_stride();
            let (src, src_stride) = planes(n, *swap, |i| {
                let data = inframe.plane_data(i as u32).ok()?;
                Some((data.as_ptr().cast_mut(), *in_strides.get(i)?))
            })
            .ok_or(gst::FlowError::Error)?;
            // Copied out (no allocation on this per-frame path): the planes are borrowed mutably.
            let mut out_strides = [0; 4];
            for (to, from) in out_strides.iter_mut().zip(outframe.plane_stride()) {
                *to = *from;
            }
            let (dst, dst_stride) = planes(n, *swap, |i| {
                let data = outframe.plane_data_mut(i as u32).ok()?;
                Some((data.as_mut_ptr(), *out_strides.get(i)?))
            })
            .ok_or(gst::FlowError::Error)?;
            let height = c_int::try_from(inframe.height()).map_err(|_| gst::FlowError::Error)?;
            let src: [*const u8; 4] = src.map(|p| p.cast_const());
            // SAFETY: the planes are the mapped frames' own (sized by their VideoInfo for the
            // negotiated sizes and format the context was made for), both mapped for the call.
            let rows = unsafe {
                ffi::sws_scale(
                    context.0,
                    src.as_ptr(),
                    src_stride.as_ptr(),
                    0,
                    height,
                    dst.as_ptr(),
                    dst_stride.as_ptr(),
                )
            };
            if rows <= 0 {
                return Err(gst::FlowError::Error);
            }
            Ok(gst::FlowSuccess::Ok)
        }
    }
}

glib::wrapper! {
    /// The `sluicescale` element.
    pub struct SwScale(ObjectSubclass<imp::SwScale>)
        @extends gst_video::VideoFilter, gstreamer_base::BaseTransform, gst::Element, gst::Object;
}

/// Registers `sluicescale` in this process.
pub(crate) fn register() -> Result<(), glib::BoolError> {
    gst::Element::register(None, "sluicescale", gst::Rank::NONE, SwScale::static_type())
}

#[cfg(test)]
mod tests;
