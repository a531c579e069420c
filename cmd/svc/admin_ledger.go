package main

import "github.com/spf13/cobra"

// adminLedgerCmd is filled in by the ledger area; nil adds nothing.
func adminLedgerCmd() *cobra.Command { return nil }
