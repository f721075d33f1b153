//! ApiVersions: the advertised table from `oxbow_protocol::versions`.

use oxbow_protocol::messages::api_versions_response::ApiVersion;
use oxbow_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use oxbow_protocol::versions;

use super::Ctx;

pub fn ranges() -> Vec<ApiVersion> {
    versions::supported()
        .into_iter()
        .map(|r| {
            let mut v = ApiVersion::default();
            v.api_key = r.key as i16;
            v.min_version = r.min;
            v.max_version = r.max;
            v
        })
        .collect()
}

pub async fn handle(_ctx: &Ctx<'_>, _req: ApiVersionsRequest) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = ranges();
    resp.finalized_features_epoch = -1;
    resp
}
