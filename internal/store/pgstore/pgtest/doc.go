// Package pgtest starts a real PostgreSQL for tests: the machine's own
// (Debian's postgresql package: /usr/lib/postgresql/N/bin), initialised
// in a temporary directory and run as the postgres user (initdb refuses
// root) on a private Unix socket, with no TCP listener, and removed when
// stopped. Each test gets a database of its own (NewDatabase).
package pgtest
