/* The mimalloc options the kerf binary sets (see keep_freed_memory and keep_memory_tight in
   main.rs), named as mimalloc's own header names them: compiled against the header of the
   mimalloc that is linked, so an option cannot silently become another. */
#include <mimalloc.h>

/* Freed memory is kept for the next use instead of being given back to the system, and no
   transparent huge pages are asked for. */
void kerf_mimalloc_keep_freed_memory(void) {
    mi_option_set(mi_option_purge_delay, -1);
    mi_option_set(mi_option_allow_thp, 0);
}

/* Freed memory is given back at once, and no transparent huge pages are asked for. */
void kerf_mimalloc_keep_memory_tight(void) {
    mi_option_set(mi_option_purge_delay, 0);
    mi_option_set(mi_option_allow_thp, 0);
}
