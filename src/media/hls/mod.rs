//! HLS text shared by live and VOD.

#[cfg(test)]
mod golden;
