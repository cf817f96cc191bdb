package connections

import (
	"context"
	"sort"
)

// RoleAudit is what AuditReadRoles found about one PostgreSQL connection's
// read role, or one MySQL connection's read user.
type RoleAudit struct {
	// Connection is the connection name.
	Connection string
	// Role is the role the read DSN logs in as.
	Role string
	// Excess lists rights beyond reading: "superuser", or the predefined
	// roles pg_write_server_files, pg_read_server_files, pg_signal_backend,
	// pg_execute_server_program and pg_read_all_stats that the role is a
	// member of; for
	// MySQL the privileges beyond SELECT (FILE, SUPER, INSERT, ..., with
	// where they are granted: " on a database", " on a table").
	Excess []string
	// Problems lists what stops the server-side check from running: no
	// TEMPORARY privilege on the database, or a server in recovery (a
	// standby accepts no temporary view).
	Problems []string
	// Err is set when the audit could not run (the database is down); the
	// other fields are then empty.
	Err error
}

// predefinedRoles are the roles whose membership gives a read role power
// beyond reading: the server's files, other sessions (signalled, or their
// SQL read as it runs in pg_stat_activity: pg_read_all_stats, which
// pg_monitor includes), programs.
var predefinedRoles = []string{"pg_write_server_files", "pg_read_server_files", "pg_signal_backend", "pg_execute_server_program", "pg_read_all_stats"}

// AuditReadRoles logs in through each PostgreSQL and MySQL connection's
// read DSN and reports what its role (user) may do beyond reading, and
// whether the server-side check can run there. The guards hold either way; a least-privilege role
// is the second lock for what they cannot see (see pgguard.go). Results are
// sorted by connection name.
func (r *Registry) AuditReadRoles(ctx context.Context) []RoleAudit {
	var out []RoleAudit
	for _, c := range r.conns {
		if c.spec.Dialect == MySQL {
			out = append(out, c.auditMySQL(ctx))
			continue
		}
		if c.spec.Dialect != Postgres {
			continue
		}
		a := RoleAudit{Connection: c.spec.Name}
		var super, temp, recovery bool
		member := make([]bool, len(predefinedRoles))
		dest := []any{&a.Role, &super, &temp, &recovery}
		for i := range member {
			dest = append(dest, &member[i])
		}
		err := c.read.QueryRowContext(ctx, `SELECT current_user::text, r.rolsuper,
				has_database_privilege(current_database(), 'TEMPORARY'), pg_is_in_recovery(),
				pg_has_role(current_user, 'pg_write_server_files', 'MEMBER'),
				pg_has_role(current_user, 'pg_read_server_files', 'MEMBER'),
				pg_has_role(current_user, 'pg_signal_backend', 'MEMBER'),
				pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'),
				pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')
			FROM pg_roles r WHERE r.rolname = current_user`).Scan(dest...)
		if err != nil {
			out = append(out, RoleAudit{Connection: c.spec.Name, Err: dbError(err)})
			continue
		}
		if super {
			a.Excess = []string{"superuser"}
		} else {
			for i, ok := range member {
				if ok {
					a.Excess = append(a.Excess, predefinedRoles[i])
				}
			}
		}
		if !temp {
			a.Problems = append(a.Problems, "no TEMPORARY privilege on the database: the server-side check cannot run, so every query is refused")
		}
		if recovery {
			a.Problems = append(a.Problems, "the server is a standby: the server-side check cannot run there, so every query is refused")
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Connection < out[j].Connection })
	return out
}
