# bash completion for vramctl, vramd's command-line client.
#
# Completes the commands, each command's options (and the global ones), jobs' subcommands,
# job states, files where a command takes one, and model names, which it asks the running
# vramd for: `vramctl ps` (GET /v1/status) with the --url, --token and --token-file given on
# the line so far (else $VRAMD_URL and the other defaults, as vramctl itself does), bounded
# by --timeout 2s. With no vramd reachable, model names complete to nothing.
#
# Installed as /usr/share/bash-completion/completions/vramctl; to try it from a checkout:
#   source contrib/completions/vramctl.bash
# Kept in step with src/cli/vramctl.c by tests/cli/test_completion.py.

_vramctl_commands="status top ps queue logs load unload pin unpin restart drain reload jobs check-config help"
_vramctl_global_opts="--url --token --token-file --json --timeout --help --version"

# The model names of the vramd that the line's --url (else $VRAMD_URL) names, one per line.
_vramctl_models()
{
    local -a conn=()
    local i w
    for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
            --url | --token | --token-file)
                [[ $i -lt $((COMP_CWORD)) ]] && conn+=("$w" "${COMP_WORDS[i + 1]}")
                ((i++))
                ;;
            --url=* | --token=* | --token-file=*) conn+=("$w") ;;
        esac
    done
    local cmd=${COMP_WORDS[0]:-vramctl}
    command -v "$cmd" >/dev/null 2>&1 || cmd=vramctl
    "$cmd" "${conn[@]}" --timeout 2s ps 2>/dev/null | while read -r model _; do
        [[ $model == MODEL ]] || printf '%s\n' "$model"
    done | sort -u
}

_vramctl()
{
    local cur=${COMP_WORDS[COMP_CWORD]}
    local prev=""
    ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
    COMPREPLY=()

    # The command and (for jobs) its subcommand: the first words that are not options or
    # option values.
    local cmd="" sub="" i w
    local -i args=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
            --url | --token | --token-file | --timeout | --events | --interval | -n | --lines | \
                --for | --path | --method | --body | --json-body | --header | --priority | \
                --deadline | --wait-timeout | -o | --output | --state | --model | --limit | --cursor)
                ((i++))
                continue
                ;;
            -*) continue ;;
        esac
        if [[ -z $cmd ]]; then
            cmd=$w
        elif [[ $cmd == jobs && -z $sub ]]; then
            sub=$w
        else
            args+=1
        fi
    done

    # Values of options.
    case $prev in
        --token-file | --body | -o | --output)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
            return 0
            ;;
        --model)
            COMPREPLY=($(compgen -W "$(_vramctl_models)" -- "$cur"))
            return 0
            ;;
        --state)
            COMPREPLY=($(compgen -W "queued running succeeded failed cancelled" -- "$cur"))
            return 0
            ;;
        --method)
            COMPREPLY=($(compgen -W "POST GET PUT PATCH DELETE" -- "$cur"))
            return 0
            ;;
        --url | --token | --timeout | --events | --interval | -n | --lines | --for | --path | \
            --json-body | --header | --priority | --deadline | --wait-timeout | --limit | --cursor)
            return 0
            ;;
    esac

    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$_vramctl_global_opts" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$_vramctl_commands" -- "$cur"))
        fi
        return 0
    fi

    local opts=""
    case $cmd in
        status) opts="--events" ;;
        top) opts="--interval -n --iterations --events" ;;
        ps) opts="" ;;
        queue) opts="--limit" ;;
        logs) opts="-n --lines -f --follow --for -t --timestamps" ;;
        load | unload | pin | unpin | restart | reload) opts="" ;;
        drain) opts="--wait" ;;
        check-config) opts="--strict" ;;
        help)
            ((args == 0)) && COMPREPLY=($(compgen -W "${_vramctl_commands% help}" -- "$cur"))
            return 0
            ;;
        jobs)
            case $sub in
                "")
                    [[ $cur != -* ]] && COMPREPLY=($(compgen -W "submit get wait result cancel list" -- "$cur"))
                    [[ $cur == -* ]] && COMPREPLY=($(compgen -W "$_vramctl_global_opts" -- "$cur"))
                    return 0
                    ;;
                submit) opts="--path --method --body --json-body --header --priority --deadline --wait --wait-timeout -o --output" ;;
                wait) opts="--timeout" ;;
                result) opts="-o --output" ;;
                list) opts="--state --model --limit --cursor" ;;
                get | cancel) opts="" ;;
            esac
            ;;
        *) return 0 ;;
    esac

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts $_vramctl_global_opts" -- "$cur"))
        return 0
    fi
    if ((args == 0)); then
        case $cmd in
            queue | logs | load | unload | pin | unpin | restart) COMPREPLY=($(compgen -W "$(_vramctl_models)" -- "$cur")) ;;
            check-config)
                compopt -o filenames 2>/dev/null
                COMPREPLY=($(compgen -f -- "$cur"))
                ;;
            jobs) [[ $sub == submit ]] && COMPREPLY=($(compgen -W "$(_vramctl_models)" -- "$cur")) ;;
        esac
    fi
    return 0
}

complete -F _vramctl vramctl
