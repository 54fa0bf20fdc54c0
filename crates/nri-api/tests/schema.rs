//! The embedded schema matches the generated types and the constants.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_api::api;
use nri_api::{MESSAGE_COUNT, method};
use prost::Message;
use prost_types::FileDescriptorSet;

fn schema() -> prost_types::FileDescriptorProto {
    let fds = FileDescriptorSet::decode(nri_api::FILE_DESCRIPTOR_SET).unwrap();
    assert_eq!(fds.file.len(), 1, "the schema imports nothing");
    fds.file.into_iter().next().unwrap()
}

#[test]
fn package_and_counts() {
    let file = schema();
    assert_eq!(file.package(), nri_api::PROTO_PACKAGE);
    assert_eq!(file.syntax(), "proto3");
    assert_eq!(file.message_type.len(), MESSAGE_COUNT);
    assert_eq!(MESSAGE_COUNT, 86);
    let nested_enums: usize = file.message_type.iter().map(|m| m.enum_type.len()).sum();
    assert_eq!(file.enum_type.len() + nested_enums, 10);
}

#[test]
fn message_list_matches_schema() {
    macro_rules! names {
        ($($ty:path),* $(,)?) => {
            vec![$(<$ty as prost::Name>::NAME),*]
        };
    }
    let listed = nri_api::for_each_message!(names);
    let file = schema();
    let in_schema: Vec<&str> = file.message_type.iter().map(|m| m.name()).collect();
    assert_eq!(listed, in_schema);
    assert_eq!(
        <api::CdiDevice as prost::Name>::full_name(),
        "nri.pkg.api.v1alpha1.CDIDevice"
    );
}

#[test]
fn services_and_methods_match_constants() {
    let file = schema();
    let methods = |service: &str| -> Vec<String> {
        let s = file
            .service
            .iter()
            .find(|s| format!("{}.{}", file.package(), s.name()) == service)
            .unwrap_or_else(|| panic!("service {service} not in schema"));
        s.method.iter().map(|m| m.name().to_string()).collect()
    };
    assert_eq!(methods(nri_api::RUNTIME_SERVICE), method::RUNTIME_METHODS);
    assert_eq!(methods(nri_api::PLUGIN_SERVICE), method::PLUGIN_METHODS);
    assert_eq!(
        methods(nri_api::HOST_FUNCTIONS_SERVICE),
        method::HOST_FUNCTIONS_METHODS
    );
    assert_eq!(file.service.len(), 3);
}

#[test]
fn upstream_field_spellings_kept() {
    let file = schema();
    let field = |msg: &str, num: i32| -> String {
        let m = file.message_type.iter().find(|m| m.name() == msg).unwrap();
        m.field
            .iter()
            .find(|f| f.number() == num)
            .unwrap()
            .name()
            .to_string()
    };
    assert_eq!(field("RegisterPluginRequest", 3), "NRI_version");
    assert_eq!(field("ConfigureRequest", 6), "NRI_version");
    assert_eq!(field("Container", 20), "CDI_devices");
    assert_eq!(field("Container", 22), "image");
    assert_eq!(field("ContainerAdjustment", 8), "CDI_devices");
    assert_eq!(field("ConfigureResponse", 2), "events");
    let adj = file
        .message_type
        .iter()
        .find(|m| m.name() == "ContainerAdjustment")
        .unwrap();
    assert_eq!(adj.field.iter().map(|f| f.number()).min(), Some(2));
}
