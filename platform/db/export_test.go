package db

import "database/sql/driver"

// SimpleConnector is simpleConnector, for the benchmark that compares it
// with pgx's other modes.
func SimpleConnector(c driver.Connector) driver.Connector { return simpleConnector{c} }

// TextParams is textParams.
var TextParams = textParams
