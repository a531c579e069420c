package main

import "github.com/spf13/cobra"

// adminDepositsCmd is filled in by the deposit area; nil adds nothing.
func adminDepositsCmd() *cobra.Command { return nil }

// adminWalletAlertsCmd is filled in by the deposit area; nil adds nothing.
func adminWalletAlertsCmd() *cobra.Command { return nil }
