package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/platform/config"
	"svc/platform/tracing"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.2.0-dev"

func newRootCmd() *cobra.Command {
	app.Version = version
	root := &cobra.Command{
		Use:           "svc",
		Short:         "Custodial crypto payment and ledger service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAPICmd(), newWorkerCmd(), newMigrateCmd(), newAdminCmd(), ledgerCmd(), newVersionCmd(), newSimulatorCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "svc", version)
			return nil
		},
	}
}

// loadConfig reads and validates the configuration; a bad setting stops
// the command with a message naming it.
func loadConfig() (config.Config, *slog.Logger, error) {
	cfg, err := config.Load()
	if err != nil {
		return config.Config{}, nil, err
	}
	return cfg, newLogger(cfg.LogLevel), nil
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	// trace_id and span_id on the lines logged inside a span.
	return slog.New(tracing.NewLogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})))
}

// openApp loads the configuration and assembles the service, with traces
// when the OTEL_* environment asks for them (tracing.FromEnv).
func openApp(ctx context.Context) (*app.App, error) { return openAppWith(ctx, nil) }

// openAppWith is openApp with override, a command's flags, applied to the
// configuration before it is validated again: a flag that stands for a
// setting obeys the setting's rules.
func openAppWith(ctx context.Context, override func(*config.Config)) (*app.App, error) {
	cfg, log, err := loadConfig()
	if err != nil {
		return nil, err
	}
	if override != nil {
		override(&cfg)
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	tr, err := tracing.FromEnv(ctx, version)
	if err != nil {
		return nil, err
	}
	a, err := app.New(ctx, cfg, log, app.Options{Tracing: tr})
	if err != nil {
		_ = tr.Shutdown(ctx)
		return nil, err
	}
	if tr.Enabled() {
		log.Info("traces are exported over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	return a, nil
}
