package main

import (
	"context"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
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
			override := func(c *config.Config) {
				if addr != "" {
					c.AdminUI.Addr = addr
				}
			}
			return untilSignal(cmd, override, func(ctx context.Context, a *app.App) error {
				listening, stopUI, err := a.ServeAdminUI(ctx)
				if err != nil {
					return err
				}
				defer stopUI()
				url := "http://" + listening + "/"
				if err := showLine(cmd, map[string]string{"url": url}, "River UI on %s (user: any, password: an admin API key); Ctrl-C stops it\n", url); err != nil {
					return err
				}
				<-ctx.Done()
				return nil
			})
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "host:port to listen on (default ADMIN_UI_ADDR)")
	return c
}
