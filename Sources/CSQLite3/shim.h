// SQLite 3. SQLITE_TRANSIENT is a macro Swift cannot import, so it is wrapped here.
#include <sqlite3.h>
static inline sqlite3_destructor_type csqlite3_transient(void) { return SQLITE_TRANSIENT; }
