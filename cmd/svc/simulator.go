package main

import "github.com/spf13/cobra"

// newSimulatorCmd runs the processor and TronGrid simulator (filled in by
// the processor work); hidden because it is for local runs only.
func newSimulatorCmd() *cobra.Command {
	return &cobra.Command{Use: "simulator", Short: "Run the BTCPay and TronGrid simulator (local use only)", Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
}
