package main

import "github.com/spf13/cobra"

// ledgerCmd returns `svc ledger`: the ledger's offline tools, which check
// what the service publishes without its database or configuration.
func ledgerCmd() *cobra.Command {
	c := &cobra.Command{Use: "ledger", Short: "Offline ledger tools: check what the service publishes, without its database"}
	c.AddCommand(ledgerVerifyExportCmd(), ledgerVerifyProofCmd())
	return c
}
