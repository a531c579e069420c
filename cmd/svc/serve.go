package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"svc/migrations"
	"svc/platform/db"
	"svc/platform/queue"
)

func newAPICmd() *cobra.Command {
	return &cobra.Command{
		Use:   "api",
		Short: "Serve the HTTP API on $PORT",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			a, err := openApp(ctx)
			if err != nil {
				return err
			}
			defer a.Close()
			if err := db.RequireMigrated(ctx, a.DB, migrations.FS); err != nil {
				return err
			}
			srv := a.HTTP()
			ln, err := net.Listen("tcp", a.Cfg.HTTP.ListenAddr())
			if err != nil {
				return fmt.Errorf("HTTP_LISTEN_HOST/PORT %s: %w", a.Cfg.HTTP.ListenAddr(), err)
			}
			a.Log.Info("api listening", "address", ln.Addr().String(), "version", version)
			errc := make(chan error, 1)
			go func() { errc <- srv.Listener(ln) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			a.Log.Info("api shutting down")
			return srv.ShutdownWithTimeout(a.Cfg.HTTP.ShutdownTimeout)
		},
	}
}

func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run background jobs: processor sync, webhook delivery, reconciliation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			a, err := openApp(ctx)
			if err != nil {
				return err
			}
			defer a.Close()
			if err := db.RequireMigrated(ctx, a.DB, migrations.FS); err != nil {
				return err
			}
			w, err := a.Worker(queue.WorkerParams{})
			if err != nil {
				return err
			}
			if err := w.Start(context.WithoutCancel(ctx)); err != nil {
				return fmt.Errorf("start worker: %w", err)
			}
			// The liveness lock is held until the worker has stopped, so
			// that the jobs a graceful stop is finishing are not taken for
			// a dead worker's.
			live, endLive := context.WithCancel(context.WithoutCancel(ctx))
			defer endLive()
			recovery := a.RecoveryJobs()
			go queue.DeadWorkerRescue{Pool: a.DB.Pool, ClientID: w.ID(), Log: a.Log, OnReconnect: func(ctx context.Context) {
				a.Log.Info("database back: running the catch-up passes now")
				for _, args := range recovery {
					if _, err := w.Insert(ctx, args, nil); err != nil {
						a.Log.Warn("catch-up pass not queued", "kind", args.Kind(), "error", err)
					}
				}
			}}.Run(live)
			a.Log.Info("worker started", "version", version)
			<-ctx.Done()
			a.Log.Info("worker shutting down")
			sctx, cancel := context.WithTimeout(context.Background(), a.Cfg.HTTP.ShutdownTimeout)
			defer cancel()
			if err := w.Stop(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
}

func newMigrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and the service's database migrations (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := loadConfig()
			if err != nil {
				return err
			}
			d, err := db.Open(cmd.Context(), cfg.Database.URL, 4)
			if err != nil {
				return err
			}
			defer d.Close()
			if err := db.Migrate(cmd.Context(), d, migrations.FS, log); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "migrations applied")
			return nil
		},
	}
}
