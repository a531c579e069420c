package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/migrations"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/queue"
)

func newAPICmd() *cobra.Command {
	return &cobra.Command{
		Use:   "api",
		Short: "Serve the HTTP API on $PORT",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serving(cmd, func(ctx context.Context, a *app.App) error {
				// DATABASE_READ_URL: the lists read the standby.
				if err := a.UseReplica(ctx); err != nil {
					return err
				}
				// METRICS_ADDR: /metrics and pprof, apart from PORT. Stopped
				// last, after the API has drained.
				_, stopMetrics, err := a.ServeMetrics()
				if err != nil {
					return err
				}
				defer stopMetrics()
				srv := a.HTTP()
				ln, err := a.Listen(srv, a.Cfg.HTTP.ListenAddr())
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
			})
		},
	}
}

func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run background jobs: processor sync, webhook delivery, reconciliation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serving(cmd, func(ctx context.Context, a *app.App) error {
				_, stopMetrics, err := a.ServeMetrics() // METRICS_ADDR, as for the api
				if err != nil {
					return err
				}
				defer stopMetrics()
				started := queue.NewStarted()
				w, err := a.Worker(queue.WorkerParams{Started: started})
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
				go queue.DeadWorkerRescue{Pool: a.DB.Pool, ClientID: w.ID(), Log: a.Log, Started: started,
					// An event a dead worker was delivering: its claim is freed
					// with its job, and the job handed back sends it at once.
					Release: []func(context.Context, time.Duration) (int64, error){a.Deliverer.ReleaseDeadClaims},
					OnReconnect: func(ctx context.Context) {
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
			})
		},
	}
}

// untilSignal runs run with the service assembled for a command that
// runs until SIGINT or SIGTERM, which end ctx; override is openAppWith's.
func untilSignal(cmd *cobra.Command, override func(*config.Config), run func(ctx context.Context, a *app.App) error) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := openAppWith(ctx, override)
	if err != nil {
		return err
	}
	defer a.Close()
	return run(ctx, a)
}

// serving is untilSignal for the api and the worker: they serve only a
// database that is ready for them (requireStartable).
func serving(cmd *cobra.Command, run func(ctx context.Context, a *app.App) error) error {
	return untilSignal(cmd, nil, func(ctx context.Context, a *app.App) error {
		if err := requireStartable(ctx, a); err != nil {
			return err
		}
		return run(ctx, a)
	})
}

// requireStartable refuses to serve an unmigrated database, and a runtime
// role that could switch the ledger's guards off: in production it is an
// error, in development a warning.
func requireStartable(ctx context.Context, a *app.App) error {
	if err := db.RequireMigrated(ctx, a.DB, migrations.Set); err != nil {
		return err
	}
	problems, err := db.RuntimeRoleProblems(ctx, a.DB)
	if err != nil {
		return err
	}
	if len(problems) == 0 {
		return nil
	}
	if a.Cfg.Production() {
		return db.RoleProblemsError(problems)
	}
	a.Log.Warn("database role: the ledger's guards do not hold against this role (refused in production)", "problems", problems)
	return nil
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
			url := cfg.Database.URL
			if cfg.Database.MigrateURL != "" {
				url = cfg.Database.MigrateURL
			}
			d, err := db.Open(cmd.Context(), url, 4)
			if err != nil {
				return err
			}
			defer d.Close()
			if err := db.Migrate(cmd.Context(), d, migrations.Set, log); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "migrations applied")
			// Every function the owner owns runs with a fixed search path,
			// River's and any a migration created without one included.
			pinned, err := db.PinSearchPath(cmd.Context(), d)
			if err != nil {
				return err
			}
			switch {
			case pinned == 1:
				fmt.Fprintln(cmd.OutOrStdout(), "search path pinned on 1 function")
			case pinned > 1:
				fmt.Fprintf(cmd.OutOrStdout(), "search path pinned on %d functions\n", pinned)
			}
			if cfg.Database.MigrateURL == "" {
				return nil
			}
			owner, err := db.UserOf(cfg.Database.MigrateURL)
			if err != nil {
				return fmt.Errorf("MIGRATE_DATABASE_URL: %w", err)
			}
			runtime, err := db.UserOf(cfg.Database.URL)
			if err != nil {
				return fmt.Errorf("DATABASE_URL: %w", err)
			}
			if owner == runtime {
				return nil
			}
			if err := db.GrantRuntime(cmd.Context(), d, runtime); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "grants applied to the runtime role %s\n", runtime)
			return nil
		},
	}
}
