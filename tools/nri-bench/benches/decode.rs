//! What a plugin does with a CreateContainer request before its handler
//! runs: the pre-decoding scan that bounds the decoded size
//! (`nri_api::scan`) and prost's decoding, on the benchmark's realistic
//! request (the pod and container of `nri_bench::shape`, about 4 KB), and
//! the same through `nri_plugin::Encoded` (all of it, the container alone,
//! the pod alone);
//! and the runtime's encoding of that request, into a `Vec<u8>` (what
//! `nri-runtime` does) and into a `BytesMut` (what it did: prost writes
//! each string with `put_slice`, which `BytesMut` does not inline; 2.3
//! times slower here).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nri_api::api::CreateContainerRequest;
use prost::Message;
use std::hint::black_box;

fn request() -> Vec<u8> {
    let pod = nri_bench::shape::pod(0);
    let container = nri_bench::shape::container(&pod, 0, 1);
    CreateContainerRequest {
        pod: Some(pod),
        container: Some(container),
    }
    .encode_to_vec()
}

fn create_container_request(c: &mut Criterion) {
    let bytes = request();
    let mut g = c.benchmark_group("create_container_request");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("scan", |b| {
        b.iter(|| {
            nri_api::scan::scan::<CreateContainerRequest>(black_box(&bytes))
                .unwrap()
                .decoded_size()
        });
    });
    g.bench_function("decode", |b| {
        b.iter(|| CreateContainerRequest::decode(black_box(&bytes[..])).unwrap());
    });
    // What a plugin's `create_container_encoded` pays: the whole request,
    // the container alone, the pod alone (each checked, then decoded).
    let encoded = nri_plugin::Encoded::<CreateContainerRequest>::new(bytes.clone().into());
    g.bench_function("encoded_all", |b| {
        b.iter(|| black_box(&encoded).decode().unwrap());
    });
    g.bench_function("encoded_container", |b| {
        b.iter(|| black_box(&encoded).container().unwrap());
    });
    g.bench_function("encoded_pod", |b| {
        b.iter(|| black_box(&encoded).pod().unwrap());
    });
    g.finish();
    let pod = nri_bench::shape::pod(0);
    let container = nri_bench::shape::container(&pod, 0, 1);
    let mut g = c.benchmark_group("encode_create_container_request");
    g.bench_function("bytesmut", |b| {
        b.iter(|| {
            let n = pod.encoded_len() + container.encoded_len() + 8;
            let mut buf = bytes::BytesMut::with_capacity(n);
            prost::encoding::message::encode(1, black_box(&pod), &mut buf);
            prost::encoding::message::encode(2, black_box(&container), &mut buf);
            buf.freeze()
        });
    });
    g.bench_function("vec", |b| {
        b.iter(|| {
            let n = pod.encoded_len() + container.encoded_len() + 8;
            let mut buf = Vec::with_capacity(n);
            prost::encoding::message::encode(1, black_box(&pod), &mut buf);
            prost::encoding::message::encode(2, black_box(&container), &mut buf);
            bytes::Bytes::from(buf)
        });
    });
    g.bench_function("encoded_len", |b| {
        b.iter(|| black_box(&pod).encoded_len() + black_box(&container).encoded_len());
    });
    g.finish();
}

criterion_group!(benches, create_container_request);
criterion_main!(benches);
