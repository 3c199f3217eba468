/* libFuzzer harness over the compiled reader's C core (analyzer/load/_fastpickle/core.c): every
 * input is parsed, turned into entry columns and walked like the Python layer walks it. Build
 * and run with `make fuzz` (clang, -fsanitize=fuzzer,address,undefined). */
#include <stdint.h>
#include <string.h>

#include "core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fp_doc doc;
    fp_cols cols;
    memset(&doc, 0, sizeof doc);
    memset(&cols, 0, sizeof cols);
    if (fp_parse(&doc, data, size) == 0 && fp_columns(&doc, &cols) == 0) {
        /* What the Python layer converts: the top-level values and each distinct value. */
        for (uint32_t i = 0; i + 1 < doc.root->len; i += 2)
            (void)fp_plain(&doc, doc.root->u.items[i + 1], 1);
        fp_buf key = {NULL, 0, 0};
        for (int k = 0; k < FP_N_OBJECTS; k++)
            for (size_t i = 0; i < cols.n_distinct[k]; i++) {
                if (!fp_plain(&doc, cols.distinct[k][i], 0)) __builtin_trap();  /* checked at intern */
                key.len = 0;  /* the canonical bytes the Python layer gets instead of the value */
                if (fp_serialize(&doc, cols.distinct[k][i], 0, &key) && key.len == 0) __builtin_trap();
                for (size_t e = 0; e < cols.n; e++)
                    if (cols.codes[k][e] < 0 || (size_t)cols.codes[k][e] >= cols.n_distinct[k])
                        __builtin_trap();
            }
        fp_buf_free(&key);
        (void)fp_dict_get(doc.root, "pg_config");
    }
    fp_cols_free(&cols);
    fp_doc_free(&doc);
    return 0;
}
