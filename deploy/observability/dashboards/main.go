// Command dashboards writes Oxbow's Grafana dashboards (deploy/observability/dashboards/*.json)
// and the Helm chart's copies of them and of deploy/observability/collector.yaml (charts/oxbow/files)
// with the Grafana Foundation SDK. The JSON is generated, never edited by hand: change this file
// and run `go run .` here (tests/run-all fails when the checked-in JSON differs from what this
// writes; `go run . --check` is that check).
//
// Every query reads the metrics as Prometheus names them, whether Prometheus scrapes the
// brokers' /metrics or the OpenTelemetry Collector's Prometheus exporter (docs/architecture.md,
// Metrics). tests/observability runs every query of every dashboard against a real collector
// and Prometheus fed by a known workload.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The dashboards' datasource: a variable, so that one import works with any Prometheus.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// Query is one PromQL expression of a panel and the legend of its series.
type Query struct {
	Expr   string
	Legend string
}

func q(expr, legend string) Query { return Query{Expr: expr, Legend: legend} }

func targets(qs []Query) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(qs))
	for i, x := range qs {
		out = append(out, prometheus.NewDataqueryBuilder().
			Datasource(ds).
			RefId(string(rune('A'+i))).
			Expr(x.Expr).
			LegendFormat(x.Legend))
	}
	return out
}

// Colours of a single number: green from 0 and red from 1 (Bad), or red but for exactly 1
// (ExactlyOne: the active controller count), or always green (Info).
var (
	Info       = []dashboard.Threshold{{Color: "green"}}
	Bad        = []dashboard.Threshold{{Color: "green"}, {Value: cog.ToPtr(1.0), Color: "red"}}
	ExactlyOne = []dashboard.Threshold{{Color: "red"}, {Value: cog.ToPtr(1.0), Color: "green"}, {Value: cog.ToPtr(2.0), Color: "red"}}
)

// Stat is a single number: the last value of its one query, coloured by `steps`.
func Stat(title, help, unit string, steps []dashboard.Threshold, x Query) cog.Builder[dashboard.Panel] {
	return stat.NewPanelBuilder().
		Title(title).
		Description(help).
		Datasource(ds).
		Unit(unit).
		Span(4).
		Height(4).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		Targets(targets([]Query{x}))
}

// Graph is a time series panel of one or more queries.
func Graph(title, help, unit string, span uint32, qs ...Query) cog.Builder[dashboard.Panel] {
	return timeseries.NewPanelBuilder().
		Title(title).
		Description(help).
		Datasource(ds).
		Unit(unit).
		Min(0).
		Span(span).
		Height(8).
		FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true).
			Calcs([]string{"lastNotNull", "max"})).
		Targets(targets(qs))
}

// Board is a dashboard: rows of panels, a datasource variable and the given query variables.
type Board struct {
	UID, Title, Help string
	Vars             []cog.Builder[dashboard.VariableModel]
	Rows             []Row
}

type Row struct {
	Title  string
	Panels []cog.Builder[dashboard.Panel]
}

// labelVar is a multi-value variable over a label's values in one metric, "All" by default.
func labelVar(name, label, metric string) cog.Builder[dashboard.VariableModel] {
	def := fmt.Sprintf("label_values(%s, %s)", metric, label)
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(ds).
		Query(dashboard.StringOrMap{String: cog.ToPtr(def)}).
		Definition(def).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")},
			Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}})
}

func (b Board) build() (dashboard.Dashboard, error) {
	d := dashboard.NewDashboardBuilder(b.Title).
		Uid(b.UID).
		Description(b.Help).
		Tags([]string{"oxbow", "kafka"}).
		Editable().
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus"))
	for _, v := range b.Vars {
		d = d.WithVariable(v)
	}
	for _, r := range b.Rows {
		d = d.WithRow(dashboard.NewRowBuilder(r.Title))
		for _, p := range r.Panels {
			d = d.WithPanel(p)
		}
	}
	return d.Build()
}

// The Helm chart's copies (observability.collector and observability.dashboards read them with
// .Files, which cannot reach outside the chart): written beside the originals, checked the same way.
const chartFiles = "../../../charts/oxbow/files"

func main() {
	check := len(os.Args) > 1 && os.Args[1] == "--check"
	if _, err := os.Stat("main.go"); err != nil {
		fmt.Fprintln(os.Stderr, "run me in deploy/observability/dashboards")
		os.Exit(2)
	}
	stale := 0
	// put writes out to path, or with --check counts it stale when the file differs.
	put := func(path string, out []byte) {
		if check {
			if old, err := os.ReadFile(path); err != nil || !bytes.Equal(old, out) {
				fmt.Fprintf(os.Stderr, "%s is not what main.go generates: run `go run .` in deploy/observability/dashboards (tests/observability/generate-dashboards)\n", path)
				stale++
			}
			return
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
	dirs := []string{".", filepath.Join(chartFiles, "dashboards")}
	written := map[string]bool{}
	for _, b := range boards() {
		written[b.UID+".json"] = true
		d, err := b.build()
		if err != nil {
			fmt.Fprintf(os.Stderr, "dashboard %s: %v\n", b.UID, err)
			os.Exit(1)
		}
		out, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			fmt.Fprintf(os.Stderr, "dashboard %s: %v\n", b.UID, err)
			os.Exit(1)
		}
		out = append(out, '\n')
		for _, dir := range dirs {
			put(filepath.Join(dir, b.UID+".json"), out)
		}
	}
	collector, err := os.ReadFile("../collector.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	put(filepath.Join(chartFiles, "collector.yaml"), collector)
	// A JSON file no board writes any more is stale too (a removed or renamed dashboard).
	for _, dir := range dirs {
		old, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, path := range old {
			if !written[filepath.Base(path)] {
				fmt.Fprintf(os.Stderr, "%s: no dashboard in main.go writes it: delete it\n", path)
				stale++
			}
		}
	}
	if stale > 0 {
		os.Exit(1)
	}
}
