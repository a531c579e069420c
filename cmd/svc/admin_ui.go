package main

import (
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"svc/platform/config"
)

func adminUICmd() *cobra.Command {
	var addr string
	c := &cobra.Command{
		Use:   "ui [--addr HOST:PORT]",
		Short: "Serve River's web UI (jobs and queues) to operators, behind an admin API key",
		Long: `Serve River's web UI: every job of the worker (queued, running, retrying, failed, done),
its arguments, attempts and errors, and the queues.

It listens on ADMIN_UI_ADDR (--addr; default 127.0.0.1:8092, this machine only) until interrupted.
In production the address must be a loopback one unless ADMIN_UI_ALLOW_NON_LOOPBACK is true.
The browser asks for a user name (any) and a password: an admin API key (svc admin keys mint
--scope admin); a readwrite key is refused. What an operator may do there, and what not:
docs/operations.md, "River UI".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			a, err := openAppWith(ctx, func(c *config.Config) {
				if addr != "" {
					c.AdminUI.Addr = addr
				}
			})
			if err != nil {
				return err
			}
			defer a.Close()
			listening, stopUI, err := a.ServeAdminUI(ctx)
			if err != nil {
				return err
			}
			defer stopUI()
			url := "http://" + listening + "/"
			if jsonFlag(cmd) {
				if err := printJSON(cmd.OutOrStdout(), map[string]string{"url": url}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "River UI on %s (user: any, password: an admin API key); Ctrl-C stops it\n", url)
			}
			<-ctx.Done()
			return nil
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "host:port to listen on (default ADMIN_UI_ADDR)")
	return c
}
