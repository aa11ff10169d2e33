//! The test collector's Go source, kept here as text and written into a temporary module
//! directory by `super::build` (no Go module is committed): `main.go`, and a `go.mod`
//! naming only the Collector's core modules at one release, its go.sum made by
//! `go mod tidy` on each build.
//!
//! The exporter is our own, in main.go: contrib's file exporter at v0.165.1 does not
//! resolve here (`go mod tidy` needs its test dependency otlpencodingextension v0.165.1,
//! which the module proxy refuses), and the core's debug exporter writes text, not OTLP.
//! Ours writes each request it receives as one line of OTLP JSON with pdata's own
//! `pmetric.JSONMarshaler`.

/// The Collector's release: its v0.x modules and the v1.x modules that ship with it.
pub const RELEASE: &str = "v0.165.0";
pub const RELEASE_V1: &str = "v1.71.0";

/// The collector's modules that main.go imports; `go mod tidy` adds their dependencies.
const MODULES: &[(&str, &str)] = &[
    ("component", RELEASE_V1),
    ("confmap", RELEASE_V1),
    ("confmap/provider/fileprovider", RELEASE_V1),
    ("exporter", RELEASE_V1),
    ("exporter/exporterhelper", RELEASE),
    ("otelcol", RELEASE),
    ("pdata", RELEASE_V1),
    ("receiver", RELEASE_V1),
    ("receiver/otlpreceiver", RELEASE),
    ("service", RELEASE),
];

/// go.mod: the module and its direct requirements.
pub fn go_mod() -> String {
    let mut s = String::from("module hstrace/tests/otelcol\n\ngo 1.26.0\n\nrequire (\n");
    for (m, v) in MODULES {
        s += &format!("\tgo.opentelemetry.io/collector/{m} {v}\n");
    }
    s + ")\n"
}

/// main.go: the OTLP receiver, the `jsonlines` exporter, and the collector's command.
pub const MAIN_GO: &str = r#"// A minimal OpenTelemetry Collector for hstrace's OTLP tests, written by
// tests/src/otelcol/source.rs: the OTLP receiver (HTTP and gRPC) and a
// "jsonlines" exporter that writes every request it receives as one line of
// OTLP JSON, the form the tests read.
package main

import (
	"context"
	"log"
	"os"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// jsonlinesConfig: the file the requests are appended to.
type jsonlinesConfig struct {
	Path string `mapstructure:"path"`
}

// jsonlines appends each request as one line of OTLP JSON, in one write.
type jsonlines struct {
	path string
	mu   sync.Mutex
	file *os.File
}

func (j *jsonlines) start(context.Context, component.Host) error {
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	j.file = f
	return err
}

func (j *jsonlines) shutdown(context.Context) error {
	if j.file == nil {
		return nil
	}
	return j.file.Close()
}

func (j *jsonlines) push(_ context.Context, md pmetric.Metrics) error {
	line, err := (&pmetric.JSONMarshaler{}).MarshalMetrics(md)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.file.Write(append(line, '\n'))
	return err
}

func jsonlinesFactory() exporter.Factory {
	return exporter.NewFactory(
		component.MustNewType("jsonlines"),
		func() component.Config { return &jsonlinesConfig{} },
		exporter.WithMetrics(func(ctx context.Context, set exporter.Settings, cfg component.Config) (exporter.Metrics, error) {
			j := &jsonlines{path: cfg.(*jsonlinesConfig).Path}
			return exporterhelper.NewMetrics(ctx, set, cfg, j.push,
				exporterhelper.WithStart(j.start), exporterhelper.WithShutdown(j.shutdown))
		}, component.StabilityLevelDevelopment),
	)
}

func components() (otelcol.Factories, error) {
	var err error
	f := otelcol.Factories{}
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](jsonlinesFactory()); err != nil {
		return f, err
	}
	f.Telemetry = otelconftelemetry.NewFactory()
	return f, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "hstrace-test-otelcol",
			Description: "OTLP receiver + OTLP JSON lines exporter for hstrace's tests",
			Version:     "test",
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
				DefaultScheme:     "file",
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatal(err)
	}
}
"#;
