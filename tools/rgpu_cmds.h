/* Subcommands of `rgpu` that live in their own files. */
#ifndef RGPU_TOOLS_CMDS_H
#define RGPU_TOOLS_CMDS_H

/* migrate.c: argv[0] is the subcommand's name */
int rgpu_cmd_migrate(int argc, char **argv);
int rgpu_cmd_drain(int argc, char **argv);

#endif
