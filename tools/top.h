/* `rgpu top` (top.c): argv[0] is "top". */
#ifndef RGPU_TOOLS_TOP_H
#define RGPU_TOOLS_TOP_H
int rgpu_top(int argc, char **argv);
#endif
