/*
A command line as a table: one row (OptSpec) per flag holds its field in the program's options struct,
its type, its default as it would be typed, its range (OPT_INT, OPT_FLOAT) or words (OPT_CHOICE) and
its help. Everything here reads the rows and nothing else: the parser (a value of another type, or
outside the row's range or words, refused naming the flag), the defaults (each row's default parsed as
if it were typed), the usage text and a line of every flag with its value (the trainer's main.log).
So a new option is its field and one row. The rows are written with OPT_I, OPT_B, OPT_F, OPT_S, OPT_C,
which place the field with OPT_FIELD(field): the includer defines it for its struct before its table.
Plain C, header-only; also compiles as C++.
*/
#ifndef LLMC_OPTIONS_H
#define LLMC_OPTIONS_H

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h" // FATAL, fcloseCheck

// A choice row's words, each with the value it stores in the row's int field; the list ends at a NULL word.
typedef struct { const char *word; int value; } OptWord;

// The word that stores `value` (a choice field holds only its words' values: set_option).
static const char *choice_word(const OptWord *words, int value) {
    while (words->word && words->value != value) words++;
    return words->word;
}

typedef enum { OPT_INT, OPT_FLOAT, OPT_STR, OPT_CHOICE } OptType;
typedef struct {
    const char *flag;
    OptType type;
    size_t offset, size;  // the field in the options struct (OPT_FIELD)
    const char *def;      // the default, as it would be typed
    double min, max;      // OPT_INT, OPT_FLOAT: the values accepted, both ends included
    const OptWord *words; // OPT_CHOICE: the words accepted (the field, an int, holds the chosen word's value)
    const char *help;
} OptSpec;
#define OPT_I(flag, field, def, min, max, help) {flag, OPT_INT, OPT_FIELD(field), def, min, max, NULL, help}
#define OPT_B(flag, field, def, help) OPT_I(flag, field, def, 0, 1, help) // an on/off flag: 0 or 1
#define OPT_F(flag, field, def, min, max, help) {flag, OPT_FLOAT, OPT_FIELD(field), def, min, max, NULL, help}
#define OPT_S(flag, field, def, help) {flag, OPT_STR, OPT_FIELD(field), def, 0, 0, NULL, help}
#define OPT_C(flag, field, def, words, help) {flag, OPT_CHOICE, OPT_FIELD(field), def, 0, 0, words, help}

// The values a row accepts, as the usage text and a refusal say them: "fp8 or bf16", "0 or 1",
// "in [0, 100]", ">= 1" (no upper end but the type's); "" for any text.
static void option_range_text(const OptSpec *s, char *out, size_t n) {
    out[0] = '\0';
    if (s->type == OPT_STR) return;
    if (s->type == OPT_CHOICE) {
        size_t len = 0;
        for (const OptWord *w = s->words; w->word; w++) {
            const char *sep = w == s->words ? "" : w[1].word ? ", " : " or ";
            len += snprintf(out + len, len < n ? n - len : 0, "%s%s", sep, w->word);
        }
        return;
    }
    int unbounded = s->max == (s->type == OPT_INT ? (double)INT_MAX : (double)FLT_MAX);
    if (s->type == OPT_INT && s->min == 0 && s->max == 1) snprintf(out, n, "0 or 1");
    else if (unbounded) snprintf(out, n, ">= %g", s->min);
    else snprintf(out, n, "in [%g, %g]", s->min, s->max);
}

// Parses val (the text after s->flag) into its field of the options struct o: text of another type, and
// a value outside the row's range or choices, are refused naming the flag.
static void set_option(void *o, const OptSpec *s, const char *val) {
    char *p = (char *)o + s->offset, *end = NULL, range[256];
    option_range_text(s, range, sizeof(range));
    if (s->type == OPT_INT) {
        errno = 0;
        long v = strtol(val, &end, 10);
        if (*val == '\0' || *end != '\0') FATAL("option %s wants an integer, got '%s'", s->flag, val);
        if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
            FATAL("option %s wants a 32-bit integer, got '%s'", s->flag, val);
        if (v < s->min || v > s->max) FATAL("option %s must be %s, got %s", s->flag, range, val);
        *(int *)p = (int)v;
    } else if (s->type == OPT_FLOAT) {
        float v = strtof(val, &end);
        if (*val == '\0' || *end != '\0' || !isfinite(v)) FATAL("option %s wants a number, got '%s'", s->flag, val);
        if (v < s->min || v > s->max) FATAL("option %s must be %s, got %s", s->flag, range, val);
        *(float *)p = v;
    } else if (s->type == OPT_CHOICE) {
        const OptWord *w = s->words;
        while (w->word && strcmp(w->word, val) != 0) w++;
        if (!w->word) FATAL("option %s must be %s, got '%s'", s->flag, range, val);
        *(int *)p = w->value;
    } else {
        if (strlen(val) >= s->size) FATAL("option %s: value longer than %zu characters", s->flag, s->size - 1);
        strcpy(p, val);
    }
}

// A field's value as the command line would give it: floats in the fewest digits that read back the
// same float, text and a choice's word in quotes ('' for none).
static void format_option(char *out, size_t n, const OptSpec *s, const void *o) {
    const char *p = (const char *)o + s->offset;
    if (s->type == OPT_INT) {
        snprintf(out, n, "%d", *(const int *)p);
    } else if (s->type == OPT_FLOAT) {
        float v = *(const float *)p;
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(out, n, "%.*g", digits, v);
            if (strtof(out, NULL) == v) break;
        }
    } else {
        snprintf(out, n, "'%s'", s->type == OPT_CHOICE ? choice_word(s->words, *(const int *)p) : p);
    }
}

// The options struct o (size bytes) as every row's default makes it; what no row sets is 0.
static void options_default(void *o, size_t size, const OptSpec *rows, int n) {
    memset(o, 0, size);
    for (int i = 0; i < n; i++) set_option(o, &rows[i], rows[i].def);
}

// -h: "usage: <prog> [options]   <about>", then a line per row with its help, default and range.
static void options_usage(const char *prog, const char *about, const OptSpec *rows, int n) {
    printf("usage: %s [options]   %s\n", prog, about);
    for (int i = 0; i < n; i++) {
        const OptSpec *s = &rows[i];
        char range[256];
        option_range_text(s, range, sizeof(range));
        const char *quote = s->type == OPT_STR || s->type == OPT_CHOICE ? "'" : "";
        printf("  %-13s %s (default %s%s%s%s%s)\n", s->flag, s->help, quote, s->def, quote, range[0] ? "; " : "",
               range);
    }
    printf("  -h            this help\n");
}

// Parses argv's flags, each followed by its value, into o (which holds the defaults): -h or --help
// prints the usage and exits; an unknown flag prints it too and is refused.
static void options_parse(void *o, const OptSpec *rows, int n, const char *about, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            options_usage(argv[0], about, rows, n);
            exit(EXIT_SUCCESS);
        }
        const OptSpec *s = NULL;
        for (int k = 0; k < n; k++) if (strcmp(argv[i], rows[k].flag) == 0) s = &rows[k];
        if (s == NULL) {
            options_usage(argv[0], about, rows, n);
            FATAL("unknown option '%s' (see the list above)", argv[i]);
        }
        if (i + 1 >= argc) FATAL("option %s needs a value", argv[i]);
        set_option(o, s, argv[++i]);
    }
}

// Every row's flag with its value in o (format_option), each after a space: how the options were given,
// as a log records them. malloc'd: the caller frees it.
static char *options_line(const OptSpec *rows, int n, const void *o) {
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    if (!f) FATAL("cannot make main.log's options line: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
        char value[4100]; // a text field of up to 4096 characters, in quotes
        format_option(value, sizeof(value), &rows[i], o);
        fprintf(f, " %s %s", rows[i].flag, value);
    }
    fcloseCheck(f);
    char *copy = strdup(line); // a plain heap string: gcc takes the stream's buffer for one that may dangle
    free(line);
    if (!copy) FATAL("cannot make main.log's options line: out of memory");
    return copy;
}

#endif // LLMC_OPTIONS_H
