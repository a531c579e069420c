package main

import (
	"context"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/platform/config"
)

// adminConsoleCmd is svc admin console. The console is a command of its
// own, not a listener of svc api: the API faces the platform on every
// interface and keeps no state between requests, where the console faces
// operators on loopback or a private address and holds their sessions in
// its memory; apart, each has its own address, lifetime and exposure.
func adminConsoleCmd() *cobra.Command {
	var addr string
	c := &cobra.Command{
		Use:   "console [--addr HOST:PORT]",
		Short: "Serve the operators' web console, signed in with an enrolled operator's passkey",
		Long: `Serve the operators' web console on CONSOLE_ADDR (--addr; default 127.0.0.1:8093, this
machine only) until interrupted: HTTPS with CONSOLE_TLS_CERT and CONSOLE_TLS_KEY, else plain HTTP.
In production a non-loopback address is refused without TLS.

An enrolled operator signs in with their passkey (an operator key of kind webauthn); open the
printed URL, whose host is OPERATOR_WEBAUTHN_RP_ID. Sessions live in this process: a restart
signs everyone out. docs/operations.md, "Console".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			override := func(c *config.Config) {
				if addr != "" {
					c.Console.Addr = addr
				}
			}
			return untilSignal(cmd, override, func(ctx context.Context, a *app.App) error {
				url, stop, err := a.ServeConsole()
				if err != nil {
					return err
				}
				defer stop()
				if err := showLine(cmd, map[string]string{"url": url}, "console on %s (sign in with your passkey); Ctrl-C stops it\n", url); err != nil {
					return err
				}
				<-ctx.Done()
				return nil
			})
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "host:port to listen on (default CONSOLE_ADDR)")
	return c
}
