//! ApiVersions: the advertised table from `oxbow_protocol::versions`.

use oxbow_protocol::messages::api_versions_response::ApiVersion;
use oxbow_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use oxbow_protocol::{ApiKey, versions};

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

pub async fn handle(ctx: &Ctx<'_>, _req: ApiVersionsRequest) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = ranges();
    if !ctx.broker.groups.consumer_protocol() {
        // Clients use the consumer group protocol when they see its heartbeat.
        let hidden = [ApiKey::ConsumerGroupHeartbeat as i16, ApiKey::ConsumerGroupDescribe as i16];
        resp.api_keys.retain(|k| !hidden.contains(&k.api_key));
    }
    resp.finalized_features_epoch = -1;
    resp
}
