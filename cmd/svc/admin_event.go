package main

import "github.com/spf13/cobra"

// adminEventsCmd is filled in by the event area; nil adds nothing.
func adminEventsCmd() *cobra.Command { return nil }

// adminAlertsCmd is filled in by the event area; nil adds nothing.
func adminAlertsCmd() *cobra.Command { return nil }
