//! The feeds as [`nri_mux::ConnSink`]s (feature `mux`): a client or server
//! on a mux connection takes its data straight from the trunk reader
//! (`MuxReadHalf::into_sink`), with no reader task in between.

use bytes::Bytes;

use crate::client::ClientFeed;
use crate::server::ServerFeed;

impl nri_mux::ConnSink for ClientFeed {
    fn data(&mut self, bytes: Bytes) {
        ClientFeed::data(self, &bytes);
    }

    fn holds_partial(&self) -> bool {
        self.is_mid_frame()
    }

    fn ended(&mut self, error: Option<&nri_mux::Error>) {
        self.end(error.map(|e| e.clone().into()));
    }
}

impl nri_mux::ConnSink for ServerFeed {
    fn data(&mut self, bytes: Bytes) {
        ServerFeed::data(self, &bytes);
    }

    fn holds_partial(&self) -> bool {
        self.is_mid_frame()
    }

    fn ended(&mut self, error: Option<&nri_mux::Error>) {
        self.end(error.map(|e| e.clone().into()));
    }
}
