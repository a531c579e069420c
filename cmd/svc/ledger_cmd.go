package main

import "github.com/spf13/cobra"

// ledgerSubcommands are the subcommands of `svc ledger`, each registered
// by the file that defines it (in an init function), so that every offline
// ledger tool lives in its own file.
var ledgerSubcommands []func() *cobra.Command

// ledgerCmd returns `svc ledger`: the ledger's offline tools, which check
// what the service publishes without its database or configuration.
func ledgerCmd() *cobra.Command {
	c := &cobra.Command{Use: "ledger", Short: "Offline ledger tools: check what the service publishes, without its database"}
	for _, sub := range ledgerSubcommands {
		c.AddCommand(sub())
	}
	return c
}
