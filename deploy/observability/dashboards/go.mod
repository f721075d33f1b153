module github.com/oxbow/oxbow/deploy/observability/dashboards

go 1.25

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
